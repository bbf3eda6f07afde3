import RoundupRedis

/// One failed delivery of a stream entry: when, by which consumer, with what error. The stream's errors hash keeps
/// an entry's last `kept` attempts beside its last error (field `<id>:attempts`), and its dead letter carries them
/// (field `attempts`), so an operator sees how an event failed, not only how it failed last.
public struct StreamAttempt: Sendable, Equatable {
    /// Milliseconds since 1970.
    public var at: Int
    public var consumer: String
    /// As recorded: `class<TAB>message`, or the text the consumer gave.
    public var error: String

    /// Attempts an entry keeps, the latest ones: each at most about 600 bytes (the message is cut at 500), so an
    /// entry's record stays under 6 KB however often it fails.
    public static let kept = 10

    public init(at: Int, consumer: String, error: String) {
        self.at = at
        self.consumer = consumer
        self.error = error
    }

    /// The errors hash's field holding the attempts of entry `id`.
    public static func field(_ id: String) -> String { id + suffix }
    public static let suffix = ":attempts"

    /// One line: time, consumer and error separated by tabs; line breaks in the error become spaces.
    var line: String {
        let consumer = consumer.map { $0 == "\t" || $0.isNewline ? " " : $0 }
        let error = String(error.prefix(520).map { $0.isNewline ? " " : $0 })
        return "\(at)\t\(String(consumer))\t\(error)"
    }

    /// The attempts of a recorded record, oldest first; lines that do not parse are skipped.
    public static func decode(_ record: String) -> [StreamAttempt] {
        record.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: "\t", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3, let at = Int(parts[0]) else { return nil }
            return StreamAttempt(at: at, consumer: String(parts[1]), error: String(parts[2]))
        }
    }

    /// Lua: `withAttempt(record, line, kept)`, the record (false or nil when none) with one more line, keeping the
    /// last `kept`; shared by the scripts that record attempts.
    static let appendFunction = """
        local function withAttempt(record, line, kept)
          local lines = {}
          if record then for l in string.gmatch(record, '[^\\n]+') do table.insert(lines, l) end end
          table.insert(lines, line)
          while #lines > kept do table.remove(lines, 1) end
          return table.concat(lines, '\\n')
        end
        """

    /// Records a failed delivery: the entry's last error and one more attempt.
    static let record = RedisScript(
        name: "stream-record-attempt",
        source: """
            -- KEYS[1]: errors hash; ARGV[1]: entry id, ARGV[2]: error as recorded, ARGV[3]: the attempt's line,
            -- ARGV[4]: attempts kept
            \(appendFunction)
            local field = ARGV[1] .. '\(suffix)'
            redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], field, withAttempt(redis.call('HGET', KEYS[1], field), ARGV[3], tonumber(ARGV[4])))
            return 1
            """)

    /// The command that records `recorded` as entry `id`'s last error and an attempt by `consumer` now.
    static func recordCommand(errors: String, id: String, recorded: String, consumer: String, now: Int) -> RedisCommand {
        record.command(
            keys: [RedisArgument(errors)],
            arguments: [
                RedisArgument(id), RedisArgument(recorded), RedisArgument(StreamAttempt(at: now, consumer: consumer, error: recorded).line),
                RedisArgument(kept),
            ])
    }

    /// Entry ids and their attempts' fields, for an HDEL that forgets both.
    static func fieldsToForget(_ ids: [String]) -> [RedisArgument] {
        var fields: [RedisArgument] = []
        fields.reserveCapacity(ids.count * 2)
        for id in ids {
            fields.append(RedisArgument(id))
            fields.append(RedisArgument(field(id)))
        }
        return fields
    }
}
