-- redis/lua/open.lua: the body of the library function open (its ARGV and replies:
-- scripts.hpp). It runs after bind(), with the prelude's locals in scope.
local bad = check_types()
if bad then return bad end
local st = load()
if st == 'absent' then
  local cap = tonumber(ARGV[1])
  if cap == 0 then return {'absent'} end
  create(cap, ARGV[2], now_us())
  return {'created', ARGV[2], cap, channels_allowed()}
end
if st ~= 'ok' then return problem(st) end
return {'ok', S.epoch, S.cap, channels_allowed()}
