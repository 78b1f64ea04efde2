-- redis/lua/destroy.lua: the body of the library function destroy (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local st = load()
if st == 'absent' then return {'ok', 0} end
if st ~= 'ok' then return problem(st) end
local bad = check_types()
if bad then return bad end
if ARGV[1] == '1' and (redis.call('HLEN', LEASES) > 1 or S.queued > 0) then return {'busy'} end
for k, _ in pairs(key_types()) do redis.call('DEL', k) end
redis.call('DEL', P)
return {'ok', 1}
