-- ARGV: prefix, job, then hosts. Their queues' lengths, in one reply: a pipeline of one LLEN per
-- host costs a reply to parse per host, which with 100,000 hosts is most of a hosts table's time.
local P = ARGV[1]
local out = {}
for i = 3, #ARGV do out[#out + 1] = redis.call('LLEN', P .. 'q:' .. ARGV[i]) end
return out
