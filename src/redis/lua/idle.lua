-- redis/lua/idle.lua: the body of the library function idle (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local now = now_us()
local stop = begin(now)
if stop then return stop end
local sid = ARGV[1]
touch(sid, tonumber(ARGV[2]), now)
local before = tonumber(redis.call('HGET', IDLE, sid)) or 0
local after = math.max(0, before + tonumber(ARGV[3]))
if after > 0 then
  redis.call('HSET', IDLE, sid, after)
else
  redis.call('HDEL', IDLE, sid)
end
add('idlers', after - before)
reap(now)
grant_queued(now)
save()
return {'ok', S.used}
