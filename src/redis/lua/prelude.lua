-- redis/lua/prelude.lua: the code every function of the Redis backend's
-- Lua library shares (see scripts.hpp). It runs once per server, when the
-- library is loaded; each function (the other files here) then runs with
-- the keys and arguments of its call bound by bind(), at the end of this file.
--
-- Lua numbers are doubles: ids and times (about 1.7e15 us) stay exact below
-- 2^53, but tostring() would print them with 14 digits, so int() formats
-- every large number handed back to Redis.
-- The keys of the semaphore a call is about, and its arguments: bind()
-- sets them at the start of every call (see the end of this prelude).
-- Each call is given every key of the semaphore, in the order of keys() in
-- scripts.hpp, and touches no other. So a cluster node that has only some
-- of them (a slot being resharded) refuses the whole call (ASK, TRYAGAIN)
-- instead of running it halfway.
local P, LEASES, EXPIRY, SESSIONS, QUEUE, WAITERS, IDLE, OWN, MARKS, MARKS_DUE
local ARGV
local FORMAT = 'shmsem-redis/5'
-- Each hash and sorted set keeps this member (zsets at score +inf), so
-- that it exists even when empty: a node that migrates a slot refuses a
-- call while a declared key is missing, and an empty key is missing too.
local NONE = '.'
local function hashes() return {LEASES, WAITERS, IDLE, OWN, MARKS} end
local function zsets() return {EXPIRY, SESSIONS, QUEUE, MARKS_DUE} end
local function key_types()
  return {[LEASES] = 'hash', [EXPIRY] = 'zset', [SESSIONS] = 'zset', [QUEUE] = 'zset',
          [WAITERS] = 'hash', [IDLE] = 'hash', [OWN] = 'hash', [MARKS] = 'hash',
          [MARKS_DUE] = 'zset'}
end
local KEEP_LOST_MS = 3600000
local ABOUT = 'a shmsem semaphore (a bound on concurrent holders across hosts); its keys are ' ..
              'changed only by the functions of a shmsem library'
-- `sdue` with no session at all: later than any deadline (2^53 - 1 us).
local NO_DEADLINE = 9007199254740991
local HALF_LIFE_US = 10000000
local BOUNDS = {100, 1000, 5000, 10000, 50000, 100000, 500000, 1000000, 5000000, 10000000,
                60000000, 300000000}

local function int(x) return string.format('%d', x) end

-- What a session owns ("l<id>" leases, "w<id>" waits), space-separated in
-- its field of OWN.
local function items(v)
  local out = {}
  if v then
    for m in string.gmatch(v, '%S+') do out[#out + 1] = m end
  end
  return out
end
local function owned(sid) return items(redis.call('HGET', OWN, sid)) end
local function own_add(sid, m)
  local v = redis.call('HGET', OWN, sid)
  redis.call('HSET', OWN, sid, v and (v .. ' ' .. m) or m)
end
local function own_del(sid, m)
  local v = redis.call('HGET', OWN, sid)
  -- Its only item (a process that holds one permit): nothing to split.
  if v == m then
    redis.call('HDEL', OWN, sid)
    return
  end
  local keep = {}
  for _, x in ipairs(items(v)) do
    if x ~= m then keep[#keep + 1] = x end
  end
  if #keep == 0 then
    redis.call('HDEL', OWN, sid)
  else
    redis.call('HSET', OWN, sid, table.concat(keep, ' '))
  end
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- "a|b|c": the first n-1 fields, then the rest (host names come last).
local function split(s, n)
  local out, pos = {}, 1
  for i = 1, n - 1 do
    local j = string.find(s, '|', pos, true)
    if not j then out[i] = string.sub(s, pos) return out end
    out[i] = string.sub(s, pos, j - 1)
    pos = j + 1
  end
  out[n] = string.sub(s, pos)
  return out
end

-- Records are '|'-separated, the host name last (it is the only free text):
--   lease:  sid, n, granted_us, expires_us, pid, request, host
--   waiter: 'Q', sid, n, ttl_ms, enqueued_us, pid, request, host
--           'G', sid, lease id, request   (granted)
--           'R', sid, capacity            (rejected)
-- `request` is the acquire's random id, by which a caller that got no
-- reply voids it (see void()).
-- One string.match for a whole record costs about half of split()'s dozen
-- C calls; split() still reads a record with fewer fields.
-- lease_rec() gives a lease's first four fields and its tail, "pid|request|host",
-- which few calls read (lease_tail()): each string made costs a few thousand
-- instructions. table.concat(rec, '|') is the record again.
local LEASE_FIELDS = '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$'
local TAIL_FIELDS = '^([^|]*)|([^|]*)|(.*)$'
local WAITER_FIELDS = '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$'
local function lease_rec(r)
  local a, b, c, d, e = string.match(r, LEASE_FIELDS)
  if a then return {a, b, c, d, e} end
  return split(r, 5)
end
-- pid, request, host
local function lease_tail(rec)
  local pid, request, host = string.match(rec[5] or '', TAIL_FIELDS)
  if pid then return pid, request, host end
  local t = split(rec[5] or '', 3)
  return t[1], t[2], t[3]
end
local function waiter_rec(r)
  local a, b, c, d, e, f, g, h = string.match(r, WAITER_FIELDS)
  if a then return {a, b, c, d, e, f, g, h} end
  return split(r, 8)
end

-- The semaphore while the script runs. Everything that most calls read
-- and write is one field of the main hash, `state`, which load() reads with
-- one HGET and save() writes back with one HSET: the format, then numbers
-- packed as little-endian doubles (struct.pack), then the epoch. Decimal
-- fields would cost a strtod() per number read and a string.format() per
-- number written, and an HMGET a Lua table per call: together about a
-- third of the server's work for an acquire+release. Doubles keep ids,
-- times and counts exact below 2^53, as Lua's numbers do. Rarer counters
-- are decimal fields of their own, bumped with HINCRBY where they change.
-- `queued` counts the queue, `ttls` the leases with a TTL and `idlers` the
-- wait_idle() callers, and `sdue` is at or before the earliest session
-- deadline (0: unknown), so that a script can skip a call when there is
-- nothing to look at. info() shows every number as a decimal field.
local STATE = {'cap', 'used', 'seq', 'queued', 'ttls', 'idlers', 'marks', 'sdue', 'ew', 'ewt',
               'acquired', 'released', 'ws', 'hs', 'w0'}
-- Buckets w0 .. w12, then h0 .. h12: observations up to BOUNDS[i + 1] us,
-- the last one above BOUNDS[12].
-- w0, the waits of every acquire that found a seat at once, is a number
-- of the state. Each of the other 25 buckets is a decimal field of the
-- main hash, bumped by one HINCRBY (about 5,000 server instructions).
-- Packed into `state` too, they made every call read, copy and write 200
-- bytes more, and Redis's Lua hashes every byte of each string it makes:
-- one bucket rewritten with string.sub and `..` cost about 24,000.
-- Spelled out: code run when the library loads cannot reach `string`.
local STATE_PACK = '<c' .. #FORMAT .. 'ddddddddddddddd'
-- The numbers alone: struct.pack copies a string argument byte by byte,
-- so pack_state() joins the format and the epoch with `..`.
local NUMBERS_PACK = '<ddddddddddddddd'
local EPOCH_AT = #FORMAT + 8 * #STATE + 1
local S = nil
-- load() fills this one table, kept for the library's life: a new table
-- of twenty fields at every call cost about 2,000 instructions, to make
-- and then to collect.
local kept = {}
local found_format = nil

-- The `state` field of `t` (S, or the same fields at create()).
local function pack_state(t)
  return FORMAT ..
         struct.pack(NUMBERS_PACK, t.cap, t.used, t.seq, t.queued, t.ttls, t.idlers, t.marks,
                     t.sdue, t.ew, t.ewt, t.acquired, t.released, t.ws, t.hs, t.w0) ..
         t.epoch
end

local function load()
  local v = redis.pcall('HGET', P, 'state')
  if type(v) == 'table' then return 'wrongtype' end
  if v and #v >= EPOCH_AT then
    local format, cap, used, seq, queued, ttls, idlers, marks, sdue, ew, ewt, acquired, released,
          ws, hs, w0 = struct.unpack(STATE_PACK, v)
    if format == FORMAT then
      S = kept
      S.epoch, S.cap, S.used, S.seq, S.queued = string.sub(v, EPOCH_AT), cap, used, seq, queued
      S.ttls, S.idlers, S.marks, S.sdue, S.ew, S.ewt = ttls, idlers, marks, sdue, ew, ewt
      S.acquired, S.released, S.ws, S.hs, S.w0 = acquired, released, ws, hs, w0
      S.msgs, S.dirty, S.used_changed = nil, false, false
      return 'ok'
    end
  end
  -- Not a semaphore in this format: what is it?
  local f = redis.call('HGET', P, 'format')
  if not f then
    if redis.call('EXISTS', P) == 1 then return 'garbage' end
    return 'absent'
  end
  if f ~= FORMAT and string.sub(f, 1, 13) == 'shmsem-redis/' then
    found_format = f
    return 'format'
  end
  return 'garbage'
end

-- The main hash as info() shows it: every field, with `state` spelled out
-- as decimal fields (the epoch and the numbers). A histogram bucket that
-- never counted anything has no field.
local function fields()
  local out = {}
  local all = redis.call('HGETALL', P)
  for k = 1, #all, 2 do
    if all[k] ~= 'state' then
      out[#out + 1] = all[k]
      out[#out + 1] = all[k + 1]
    end
  end
  out[#out + 1] = 'epoch'
  out[#out + 1] = S.epoch
  for _, f in ipairs(STATE) do
    out[#out + 1] = f
    out[#out + 1] = f == 'ew' and string.format('%.17g', S.ew) or int(S[f])
  end
  return out
end

local function set(field, v)
  S[field] = v
  S.dirty = true
  if field == 'used' then S.used_changed = true end
end
local function add(field, d) set(field, S[field] + d) end

local function problem(st)
  if st == 'wrongtype' then return {'wrongtype', P, redis.call('TYPE', P).ok} end
  if st == 'format' then return {'format', P, found_format} end
  return {st, P}
end

local function check_types()
  for k, want in pairs(key_types()) do
    local t = redis.call('TYPE', k).ok
    if t ~= 'none' and t ~= want then return {'wrongtype', k, t} end
  end
  return nil
end

local function create(cap, epoch, now)
  -- Keys left by a semaphore whose main hash was deleted are stale.
  for _, k in ipairs(hashes()) do
    redis.call('DEL', k)
    redis.call('HSET', k, NONE, '')
  end
  for _, k in ipairs(zsets()) do
    redis.call('DEL', k)
    redis.call('ZADD', k, '+inf', NONE)
  end
  -- `about`, longer than Redis's hash-max-listpack-value (64 bytes by
  -- default), makes the main hash a hash table for good: every call reads
  -- and writes several of its fields, and in a listpack each of those is a
  -- scan and a rewrite of the whole hash (about a tenth of the server's
  -- work for an acquire+release).
  -- `format` also stands alone, for older versions to find and name.
  local state = pack_state({cap = cap, used = 0, seq = now, queued = 0, ttls = 0, idlers = 0,
                            marks = 0, sdue = 0, ew = 0, ewt = now, acquired = 0, released = 0,
                            ws = 0, hs = 0, w0 = 0, epoch = epoch})
  redis.call('HSET', P, 'format', FORMAT, 'state', state, 'created', int(now), 'about', ABOUT)
end

-- Folds the time since the last change into the average, at the old use.
local function fold(now)
  local u = S.used / S.cap
  if now > S.ewt then S.ew = u + (S.ew - u) * math.pow(0.5, (now - S.ewt) / HALF_LIFE_US) end
  S.ewt = now
end

-- Loads the semaphore and folds the average up to now: returns nil, or
-- the reply that ends the script before anything was written.
local function begin(now)
  local st = load()
  if st ~= 'ok' then return problem(st) end
  fold(now)
  return nil
end

-- One observation of `d` us in histogram 'w' (waits) or 'h' (holds).
local function hist(prefix, d)
  if d < 0 then d = 0 end
  add(prefix .. 's', d)
  local i = #BOUNDS
  for k = 1, #BOUNDS do
    if d <= BOUNDS[k] then
      i = k - 1
      break
    end
  end
  if prefix == 'w' and i == 0 then
    add('w0', 1)
    return
  end
  redis.call('HINCRBY', P, prefix .. i, 1)
end

local function note(sid, m)
  if not S.msgs then S.msgs = {} end
  local l = S.msgs[sid]
  if not l then l = {} S.msgs[sid] = l end
  l[#l + 1] = m
end

local function save()
  -- The average goes with the rest of the state, folded up to now (fold()
  -- at the same use from ewt to now, then on to a reader's time, is the
  -- fold from ewt to that time). Nothing changed, nothing is written.
  if S.dirty then redis.call('HSET', P, 'state', pack_state(S)) end
  -- Messages only hasten what the next renewal would say: a user the ACL
  -- keeps off the channels must not make a script fail after its writes.
  if S.used_changed and S.used == 0 and S.idlers > 0 then
    redis.pcall('PUBLISH', P .. ':ev-idle', 'i')
  end
  if not S.msgs then return end
  for sid, l in pairs(S.msgs) do redis.pcall('PUBLISH', P .. ':ev:' .. sid, table.concat(l, ' ')) end
end

-- 1 if this user may use the semaphore's channels (the ACL's '&'), else 0.
local function channels_allowed()
  local r = redis.pcall('PUBLISH', P .. ':ev-probe', '')
  if type(r) == 'table' and r.err then return 0 end
  return 1
end

local function enqueue(wid) add('queued', redis.call('ZADD', QUEUE, wid, wid)) end
local function dequeue(wid) add('queued', -redis.call('ZREM', QUEUE, wid)) end

-- The next lease or waiter id, which is also a fencing token: the
-- server's time in us, or one more than the last id if that is larger. So
-- ids keep growing even when Redis restarts from an older snapshot, fails
-- over to a replica that missed the last grants, or loses the semaphore
-- and re-creates it: all it takes is a clock that does not step back.
local function next_id(now)
  local id = math.max(S.seq + 1, now)
  set('seq', id)
  return id
end

-- Records kept an hour: "l<lease id>" why a lease ended without its
-- release, "v<request>" an acquire that must grant nothing (see void()).
-- They expire by hand, from MARKS_DUE, in reap().
local function mark(name, value, now)
  add('marks', redis.call('HSET', MARKS, name, value))
  redis.call('ZADD', MARKS_DUE, int(now + KEEP_LOST_MS * 1000), name)
end

local function prune_marks(now)
  if S.marks <= 0 then return end
  local due = redis.call('ZRANGEBYSCORE', MARKS_DUE, '-inf', int(now), 'LIMIT', 0, 100)
  if #due == 0 then return end
  add('marks', -redis.call('HDEL', MARKS, unpack(due)))
  redis.call('ZREM', MARKS_DUE, unpack(due))
end

-- `weight` is n as its caller received it, so that the record needs no
-- number formatted (each string made costs a few thousand instructions).
local function new_lease(sid, n, weight, ttl_ms, now, pid, request, host)
  local id = next_id(now)
  local key = int(id)
  -- The id is the time of the grant unless ids ran ahead of the clock.
  local granted = id == now and key or int(now)
  local exp = '0'
  if ttl_ms > 0 then
    exp = int(now + ttl_ms * 1000)
    redis.call('ZADD', EXPIRY, exp, key)
    add('ttls', 1)
  end
  redis.call('HSET', LEASES, key, sid .. '|' .. weight .. '|' .. granted .. '|' .. exp .. '|' ..
             pid .. '|' .. request .. '|' .. host)
  own_add(sid, 'l' .. key)
  add('acquired', 1)
  add('used', n)
  return id
end

-- why: 'released', or the counter of a loss: 'reaped', 'expired', 'force_released'.
local function end_lease(id, rec, why, now)
  redis.call('HDEL', LEASES, id)
  if rec[4] ~= '0' then
    redis.call('ZREM', EXPIRY, id)
    add('ttls', -1)
  end
  own_del(rec[1], 'l' .. id)
  local n = tonumber(rec[2])
  add('used', -n)
  if why == 'released' then
    add('released', 1)
    hist('h', now - tonumber(rec[3]))
  else
    redis.call('HINCRBY', P, why, 1)
    redis.call('HINCRBY', P, 'reclaimed_seats', n)
    mark('l' .. id, why .. '|' .. int(now), now)
  end
end

local function lost(id)
  return redis.call('HGET', MARKS, 'l' .. id) or 'unknown'
end

local function expired(rec, now)
  if rec[4] == '0' then return false end
  local exp = tonumber(rec[4])
  return exp > 0 and exp <= now
end

-- For each "l<id>" the session owns whose lease is still recorded,
-- on_lease(id, record); for each "w<id>", on_wait(id, "w<id>"). What it
-- owns is read first, so the callbacks may change it.
local function each_owned(sid, on_lease, on_wait)
  for _, m in ipairs(owned(sid)) do
    local id = string.sub(m, 2)
    if string.sub(m, 1, 1) == 'l' then
      local r = redis.call('HGET', LEASES, id)
      if r then on_lease(id, lease_rec(r)) end
    else
      on_wait(id, m)
    end
  end
end

local function reap_sessions(dead, now)
  local freed = 0
  for _, sid in ipairs(dead) do
    redis.call('ZREM', SESSIONS, sid)
    local idling = tonumber(redis.call('HGET', IDLE, sid))
    if idling then
      redis.call('HDEL', IDLE, sid)
      add('idlers', -idling)
    end
    each_owned(sid, function(id, rec)
      end_lease(id, rec, expired(rec, now) and 'expired' or 'reaped', now)
      freed = freed + tonumber(rec[2])
    end, function(id)
      redis.call('HDEL', WAITERS, id)
      dequeue(id)
    end)
    redis.call('HDEL', OWN, sid)
  end
  return freed
end

-- Ends dead sessions and expired leases. Cheap when there are none.
local function reap(now)
  prune_marks(now)
  local freed = 0
  -- No session can have lapsed before `sdue`: every deadline set since it
  -- was computed lowered it if need be (touch()), and removing a session
  -- only makes the true earliest later.
  if S.sdue <= now then
    local dead = redis.call('ZRANGEBYSCORE', SESSIONS, '-inf', int(now))
    if #dead > 0 then freed = reap_sessions(dead, now) end
    local first = redis.call('ZRANGE', SESSIONS, 0, 0, 'WITHSCORES')
    set('sdue', (#first == 0 or first[1] == NONE) and NO_DEADLINE or tonumber(first[2]))
  end
  if S.ttls <= 0 then return freed end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', EXPIRY, '-inf', int(now))) do
    local r = redis.call('HGET', LEASES, id)
    if r then
      local rec = lease_rec(r)
      end_lease(id, rec, 'expired', now)
      freed = freed + tonumber(rec[2])
    else
      redis.call('ZREM', EXPIRY, id)
    end
  end
  return freed
end

-- Renews a session. One that already lapsed loses its leases and waits
-- first: a holder that was stopped or cut off never gets them back.
local function touch(sid, session_ms, now)
  local d = tonumber(redis.call('ZSCORE', SESSIONS, sid))
  if d and d <= now then
    reap_sessions({sid}, now)
    d = nil
  end
  -- A deadline set moments ago need not move (a tight acquire/release
  -- loop would rewrite it at every call). Clients count on a tenth of the
  -- timeout here (session_deadline_ns() in session.hpp).
  local deadline = now + session_ms * 1000
  if not d or d < deadline - session_ms * 100 then
    redis.call('ZADD', SESSIONS, int(deadline), sid)
    if deadline < S.sdue then set('sdue', deadline) end
  end
end

-- The rejection carries the capacity that rejected the wait, for its message.
local function reject(wid, sid)
  redis.call('HSET', WAITERS, wid, 'R|' .. sid .. '|' .. int(S.cap))
  dequeue(wid)
  redis.call('HINCRBY', P, 'rejected', 1)
  note(sid, 'r' .. wid .. ':' .. int(S.cap))
end

-- Strict FIFO: the head is granted when its whole weight fits, and nobody
-- behind it goes first.
local function grant_queued(now)
  while S.queued > 0 do
    local head = redis.call('ZRANGE', QUEUE, 0, 0)
    if #head == 0 or head[1] == NONE then
      set('queued', 0)
      return
    end
    local wid = head[1]
    local r = redis.call('HGET', WAITERS, wid)
    if (not r) or string.sub(r, 1, 1) ~= 'Q' then
      dequeue(wid)
    else
      local w = waiter_rec(r)
      local n = tonumber(w[3])
      if n > S.cap then
        reject(wid, w[2])
      elseif S.used + n > S.cap then
        return
      else
        local id = new_lease(w[2], n, w[3], tonumber(w[4]), now, w[6], w[7], w[8])
        redis.call('HSET', WAITERS, wid, 'G|' .. w[2] .. '|' .. int(id) .. '|' .. w[7])
        dequeue(wid)
        hist('w', now - tonumber(w[5]))
        note(w[2], 'g' .. wid .. ':' .. int(id))
      end
    end
  end
end

-- An acquire whose caller got no reply (a timeout, a broken connection)
-- may still run, or have run: void() makes sure it grants nothing. Its
-- mark stops it if it comes later; its lease or queued wait goes if it
-- came first.
local function void(request, sid, now)
  mark('v' .. request, '1', now)
  each_owned(sid, function(id, rec)
    if select(2, lease_tail(rec)) == request then end_lease(id, rec, 'released', now) end
  end, function(id, m)
    local r = redis.call('HGET', WAITERS, id)
    local w = r and waiter_rec(r)
    if w and ((w[1] == 'Q' and w[7] == request) or (w[1] == 'G' and w[4] == request)) then
      redis.call('HDEL', WAITERS, id)
      dequeue(id)
      own_del(sid, m)
    end
  end)
end

-- The start of a script about one lease of the caller's session (ARGV:
-- epoch, sid, session_ms, lease id, ...): renews the session, then returns
-- the lease's record; or nil and why it is lost; or nil, nil and the reply
-- that ends the script before anything was written.
local function open_lease(now)
  local st = load()
  if st == 'absent' then return nil, nil, {'lost', 'data'} end
  if st ~= 'ok' then return nil, nil, problem(st) end
  if S.epoch ~= ARGV[1] then return nil, nil, {'lost', 'data'} end
  fold(now)
  touch(ARGV[2], tonumber(ARGV[3]), now)
  local r = redis.call('HGET', LEASES, ARGV[4])
  if not r then return nil, lost(ARGV[4]) end
  return lease_rec(r)
end

local function set_expiry(id, rec, exp)
  if rec[4] == '0' then add('ttls', 1) end
  rec[4] = int(exp)
  redis.call('HSET', LEASES, id, table.concat(rec, '|'))
  redis.call('ZADD', EXPIRY, int(exp), id)
end

local function next_expiry(now)
  local e = redis.call('ZRANGE', EXPIRY, 0, 0, 'WITHSCORES')
  if #e == 0 or e[1] == NONE then return -1 end
  local d = tonumber(e[2]) - now
  if d < 0 then d = 0 end
  return math.floor(d / 1000) + 1
end

-- The start of every call: what it is about, and nothing left from the
-- previous call (the library's state lives as long as the server's).
local function bind(keys, args)
  P, LEASES, EXPIRY, SESSIONS, QUEUE = keys[1], keys[2], keys[3], keys[4], keys[5]
  WAITERS, IDLE, OWN, MARKS, MARKS_DUE = keys[6], keys[7], keys[8], keys[9], keys[10]
  ARGV = args
  S, found_format = nil, nil
end
