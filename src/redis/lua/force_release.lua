-- redis/lua/force_release.lua: the body of the library function force_release (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local now = now_us()
local stop = begin(now)
if stop then return stop end
local displaced = 0
local all = redis.call('HGETALL', LEASES)
for k = 1, #all, 2 do
  if all[k] ~= NONE then
    local id, rec = all[k], lease_rec(all[k + 1])
    local d = redis.call('ZSCORE', SESSIONS, rec[1])
    if expired(rec, now) then
      end_lease(id, rec, 'expired', now)
    elseif (not d) or tonumber(d) <= now then
      end_lease(id, rec, 'reaped', now)
    else
      end_lease(id, rec, 'force_released', now)
      displaced = displaced + 1
    end
  end
end
grant_queued(now)
save()
return {'ok', displaced}
