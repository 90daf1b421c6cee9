-- ARGV: prefix, job, low. Hosts whose queue is at or below ``low`` entries while URLs of theirs
-- wait in the store, each with (host, refilled seq, sent seq): the refill task's work list.
local low, out = tonumber(ARGV[3]), {}
local sent = redis.call('HGETALL', KSPSEQ)
for i = 1, #sent, 2 do
  local host, s = sent[i], tonumber(sent[i + 1])
  local r = tonumber(redis.call('HGET', KSPREF, host) or '0')
  if s > r and redis.call('LLEN', P .. 'q:' .. host) <= low then
    out[#out + 1] = host
    out[#out + 1] = r
    out[#out + 1] = s
  end
end
return out
