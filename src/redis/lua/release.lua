-- redis/lua/release.lua: the body of the library function release (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local now = now_us()
local rec, why, early = open_lease(now)
if early then return early end
local result
if not rec then
  result = {'lost', why}
elseif expired(rec, now) then
  end_lease(ARGV[4], rec, 'expired', now)
  result = {'lost', 'expired|' .. int(now)}
else
  end_lease(ARGV[4], rec, 'released', now)
  result = {'ok'}
end
reap(now)
grant_queued(now)
save()
if result[1] == 'ok' then return {'ok', S.used, S.cap} end
return {'lost', result[2], S.used, S.cap}
