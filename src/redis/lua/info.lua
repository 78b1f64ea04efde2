-- redis/lua/info.lua: the body of the library function info (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local now = now_us()
local st = load()
if st ~= 'ok' then return problem(st) end
local holders = {}
if ARGV[1] == '1' then
  local all = redis.call('HGETALL', LEASES)
  for k = 1, #all, 2 do
    if all[k] ~= NONE then
      local rec = lease_rec(all[k + 1])
      local d = redis.call('ZSCORE', SESSIONS, rec[1])
      local state = 'alive'
      if expired(rec, now) then state = 'expired'
      elseif (not d) or tonumber(d) <= now then state = 'dead' end
      local pid, _, host = lease_tail(rec)
      for _, v in ipairs({all[k], rec[2], rec[3], rec[4], pid, host, state}) do
        holders[#holders + 1] = v
      end
    end
  end
end
return {'ok', int(now), fields(), S.queued, holders}
