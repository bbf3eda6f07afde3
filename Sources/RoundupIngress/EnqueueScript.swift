import RoundupRedis

/// Dedupe and enqueue in one atomic step: remember the action id (SET NX EX) and, only if it is new,
/// append the event to the stream. Returns the stream entry id, or nil for a redelivery.
enum IngressScripts {
    static let enqueue = RedisScript(
        name: "ingress-enqueue",
        source: """
            -- KEYS[1]: seen-action key, KEYS[2]: webhook stream; ARGV[1]: TTL seconds, ARGV[2..]: field, value, ...
            if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
              return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 2))
            end
            return false
            """)
}
