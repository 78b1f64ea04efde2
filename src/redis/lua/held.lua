-- redis/lua/held.lua: the body of the library function held (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local now = now_us()
local st = load()
if st == 'absent' then return {'lost', 'data'} end
if st ~= 'ok' then return problem(st) end
if S.epoch ~= ARGV[1] then return {'lost', 'data'} end
local id = ARGV[2]
local r = redis.call('HGET', LEASES, id)
if not r then return {'lost', lost(id)} end
local rec = lease_rec(r)
if expired(rec, now) then return {'lost', 'expired|' .. rec[4]} end
local d = redis.call('ZSCORE', SESSIONS, rec[1])
if (not d) or tonumber(d) <= now then return {'lost', 'reaped|' .. int(now)} end
return {'ok'}
