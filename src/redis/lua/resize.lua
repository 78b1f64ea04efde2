-- redis/lua/resize.lua: the body of the library function resize (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local now = now_us()
local stop = begin(now)
if stop then return stop end
set('cap', tonumber(ARGV[1]))
for _, wid in ipairs(redis.call('ZRANGE', QUEUE, 0, -1)) do
  local r = redis.call('HGET', WAITERS, wid)
  if r and string.sub(r, 1, 1) == 'Q' then
    local w = waiter_rec(r)
    if tonumber(w[3]) > S.cap then reject(wid, w[2]) end
  end
end
reap(now)
grant_queued(now)
save()
return {'ok'}
