-- redis/lua/cancel.lua: the body of the library function cancel (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local now = now_us()
local st = load()
if st == 'absent' then return {'gone'} end
if st ~= 'ok' then return problem(st) end
if S.epoch ~= ARGV[1] then return {'gone'} end
fold(now)
local sid, wid = ARGV[2], ARGV[4]
touch(sid, tonumber(ARGV[3]), now)
local r = redis.call('HGET', WAITERS, wid)
local result = {'gone'}
if r then
  local kind = string.sub(r, 1, 1)
  redis.call('HDEL', WAITERS, wid)
  own_del(sid, 'w' .. wid)
  if kind == 'G' then
    local g = split(r, 4)
    if ARGV[6] == '1' then
      result = {'granted', tonumber(g[3])}
    else
      local lr = redis.call('HGET', LEASES, g[3])
      if lr then end_lease(g[3], lease_rec(lr), 'released', now) end
      if ARGV[5] ~= '' then redis.call('HINCRBY', P, ARGV[5], 1) end
      result = {'returned'}
    end
  elseif kind == 'R' then
    result = {'rejected', tonumber(split(r, 3)[3]) or -1}
  else
    dequeue(wid)
    if ARGV[5] ~= '' then redis.call('HINCRBY', P, ARGV[5], 1) end
    result = {'left'}
  end
end
reap(now)
grant_queued(now)
save()
return result
