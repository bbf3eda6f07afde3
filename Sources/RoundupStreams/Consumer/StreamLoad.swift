import RoundupRedis

/// What waits in one stream, per producer: a hash the enqueue script raises and the consumer lowers when it removes
/// an entry (acknowledged, or moved to the dead letters), so a producer's share of the stream can be bounded without
/// reading the stream. Its fields: `n:<owner>` (entries), `b:<owner>` (bytes of their `sizeField`), `bytes` (the
/// stream's bytes), and whatever else the producer keeps there (the ingress's rate buckets `r:<owner>`).
///
/// It heals: a count never goes below zero, and the enqueue script starts the hash again whenever the stream is
/// empty, so an entry removed some other way (an operator's purge, a crash between two writes) is forgotten when the
/// stream next drains.
public struct StreamLoad: Sendable, Hashable {
    /// The hash, in the stream's slot.
    public var key: String
    /// The entry's field naming its owner (`account`).
    public var ownerField: String
    /// The entry's field whose length is counted (`body`).
    public var sizeField: String

    public init(key: String, ownerField: String, sizeField: String) {
        self.key = key
        self.ownerField = ownerField
        self.sizeField = sizeField
    }

    /// A Lua function, `release(stream, load, id, ownerField, sizeField)`: lowers the load by the entry `id` if it is
    /// still in `stream`. For scripts that remove entries; call it before the entry is deleted.
    static let releaseFunction = """
        local function release(stream, load, id, ownerField, sizeField)
          local entry = redis.call('XRANGE', stream, id, id)[1]
          if not entry then return end
          local fields, owner, size = entry[2], nil, 0
          for i = 1, #fields, 2 do
            if fields[i] == ownerField then owner = fields[i + 1] elseif fields[i] == sizeField then size = string.len(fields[i + 1]) end
          end
          if not owner then return end
          if redis.call('HINCRBY', load, 'n:' .. owner, -1) <= 0 then
            redis.call('HDEL', load, 'n:' .. owner, 'b:' .. owner)
          elseif redis.call('HINCRBY', load, 'b:' .. owner, -size) < 0 then
            redis.call('HSET', load, 'b:' .. owner, 0)
          end
          if redis.call('HINCRBY', load, 'bytes', -size) < 0 then redis.call('HSET', load, 'bytes', 0) end
        end
        """

    /// Acknowledges and deletes entries (and their recorded errors and attempts), lowering the load by each.
    static let settle = RedisScript(
        name: "stream-settle-with-load",
        source: """
            -- KEYS[1]: stream, KEYS[2]: load hash, KEYS[3]: errors hash
            -- ARGV[1]: group, ARGV[2]: owner field, ARGV[3]: size field, ARGV[4..]: entry ids
            \(releaseFunction)
            for i = 4, #ARGV do release(KEYS[1], KEYS[2], ARGV[i], ARGV[2], ARGV[3]) end
            local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 4))
            redis.call('XDEL', KEYS[1], unpack(ARGV, 4))
            local fields = {}
            for i = 4, #ARGV do fields[#fields + 1] = ARGV[i]; fields[#fields + 1] = ARGV[i] .. '\(StreamAttempt.suffix)' end
            redis.call('HDEL', KEYS[3], unpack(fields))
            return acked
            """)
}

extension RedisScript {
    /// The script as one command of a pipeline: EVAL with its source (Redis keeps the compiled script by its SHA1, so
    /// only the text travels again; a pipeline cannot retry an EVALSHA that met NOSCRIPT).
    func command(keys: [RedisArgument], arguments: [RedisArgument]) -> RedisCommand {
        RedisCommand("EVAL", [RedisArgument(source), RedisArgument(keys.count)] + keys + arguments)
    }
}
