-- redis/lua/acquire.lua: the body of the library function acquire (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local now = now_us()
local st = load()
-- A voided request grants nothing. The main hash counts the marks, so
-- that with none (the usual case) there is nothing to look up.
if (st ~= 'ok' or S.marks > 0) and redis.call('HEXISTS', MARKS, 'v' .. ARGV[10]) == 1 then
  return {'void'}
end
if st == 'absent' and tonumber(ARGV[1]) > 0 then
  local bad = check_types()
  if bad then return bad end
  create(tonumber(ARGV[1]), ARGV[2], now)
  st = load()
end
if st ~= 'ok' then return problem(st) end
fold(now)
local sid, n, mode = ARGV[3], tonumber(ARGV[5]), ARGV[9]
touch(sid, tonumber(ARGV[4]), now)
local result
if n > S.cap then
  redis.call('HINCRBY', P, mode == 'try' and 'try_failures' or 'rejected', 1)
  result = {'exceeds', S.epoch, S.cap, S.used}
else
  reap(now)
  grant_queued(now)
  if S.queued == 0 and S.used + n <= S.cap then
    local id = new_lease(sid, n, ARGV[5], tonumber(ARGV[6]), now, ARGV[7], ARGV[10], ARGV[8])
    hist('w', 0)
    result = {'ok', S.epoch, id, S.cap, S.used}
  elseif mode ~= 'wait' then
    redis.call('HINCRBY', P, mode == 'try' and 'try_failures' or 'timeouts', 1)
    result = {'full', S.epoch, S.cap, S.used}
  else
    local wid = int(next_id(now))
    redis.call('HSET', WAITERS, wid, 'Q|' .. sid .. '|' .. n .. '|' .. ARGV[6] .. '|' .. int(now) ..
               '|' .. ARGV[7] .. '|' .. ARGV[10] .. '|' .. ARGV[8])
    enqueue(wid)
    own_add(sid, 'w' .. wid)
    result = {'queued', S.epoch, tonumber(wid), S.cap, S.used, next_expiry(now)}
  end
end
save()
return result
