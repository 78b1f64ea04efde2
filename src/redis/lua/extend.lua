-- redis/lua/extend.lua: the body of the library function extend (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local now = now_us()
local rec, why, early = open_lease(now)
if early then return early end
local result = {'ok'}
if not rec then
  result = {'lost', why}
elseif expired(rec, now) then
  result = {'lost', 'expired|' .. rec[4]}
else
  set_expiry(ARGV[4], rec, now + tonumber(ARGV[5]) * 1000)
end
save()
return result
