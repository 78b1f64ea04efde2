-- redis/lua/renew.lua: the body of the library function renew (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local now = now_us()
local st = load()
if st ~= 'ok' then return problem(st) end
if S.epoch ~= ARGV[1] then return {'epoch', S.epoch} end
fold(now)
local sid = ARGV[2]
touch(sid, tonumber(ARGV[3]), now)
reap(now)
local i = 4
local function list(width)
  local n = tonumber(ARGV[i])
  local out = {}
  for k = 1, n * width do out[k] = ARGV[i + k] end
  i = i + n * width + 1
  return out
end
for _, request in ipairs(list(1)) do void(request, sid, now) end
for _, id in ipairs(list(1)) do
  local r = redis.call('HGET', LEASES, id)
  if r then
    local rec = lease_rec(r)
    if rec[1] == sid then end_lease(id, rec, expired(rec, now) and 'expired' or 'released', now) end
  end
end
for _, wid in ipairs(list(1)) do
  local r = redis.call('HGET', WAITERS, wid)
  if r then
    local kind = string.sub(r, 1, 1)
    if kind == 'G' then
      local g = split(r, 4)
      local lr = redis.call('HGET', LEASES, g[3])
      if lr then end_lease(g[3], lease_rec(lr), 'released', now) end
    elseif kind == 'Q' then
      dequeue(wid)
    end
    redis.call('HDEL', WAITERS, wid)
    own_del(sid, 'w' .. wid)
  end
end
for _, wid in ipairs(list(1)) do
  redis.call('HDEL', WAITERS, wid)
  own_del(sid, 'w' .. wid)
end
local leases = list(2)
local lease_status = {}
for k = 1, #leases, 2 do
  local id, ttl = leases[k], tonumber(leases[k + 1])
  local r = redis.call('HGET', LEASES, id)
  if not r then
    lease_status[#lease_status + 1] = lost(id)
  else
    local rec = lease_rec(r)
    if expired(rec, now) then
      end_lease(id, rec, 'expired', now)
      lease_status[#lease_status + 1] = 'expired|' .. int(now)
    else
      if ttl > 0 then set_expiry(id, rec, now + ttl * 1000) end
      lease_status[#lease_status + 1] = 'ok'
    end
  end
end
grant_queued(now)
local waiter_status = {}
for _, wid in ipairs(list(1)) do
  local r = redis.call('HGET', WAITERS, wid)
  local s = 'gone'
  if r then
    local kind = string.sub(r, 1, 1)
    if kind == 'Q' then s = 'q'
    elseif kind == 'G' then s = 'g' .. split(r, 4)[3]
    elseif kind == 'R' then s = 'r' .. (split(r, 3)[3] or '') end
  end
  waiter_status[#waiter_status + 1] = s
end
save()
return {'ok', lease_status, waiter_status, S.used, S.cap, next_expiry(now)}
