-- redis/lua/reap.lua: the body of the library function reap (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local now = now_us()
local stop = begin(now)
if stop then return stop end
local freed = reap(now)
grant_queued(now)
save()
return {'ok', freed}
