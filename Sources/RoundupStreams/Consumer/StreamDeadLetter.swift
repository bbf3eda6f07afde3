import RoundupRedis

/// One entry of a dead-letter stream: the original entry's fields, and why and when it was given up. The only code
/// that names the dead letter's own fields (the dead-letter script writes them from here).
public struct StreamDeadLetter: Sendable, Equatable {
    public enum Field: String, CaseIterable, Sendable {
        case originalID = "original_id"
        case error, deliveries
        case failedAt = "failed_at"
        case attempts
    }

    static let ownFields = Set(Field.allCases.map(\.rawValue))

    /// Its id in the dead-letter stream.
    public var id: String
    /// The fields the entry had on its own stream.
    public var original: [String: [UInt8]]
    public var originalID: String?
    /// The last recorded error (`class<TAB>message`), or the one the consumer gave when none was recorded.
    public var error: String?
    public var deliveries: Int?
    /// Milliseconds since 1970.
    public var failedAt: Int?
    /// Its failed deliveries, oldest first: the last `StreamAttempt.kept` (none for a stream that records no errors,
    /// or a letter from before attempts were kept).
    public var attempts: [StreamAttempt]

    public init(id: String, fields: [String: [UInt8]]) {
        self.id = id
        func text(_ field: Field) -> String? { fields[field.rawValue].map { String(decoding: $0, as: UTF8.self) } }
        originalID = text(.originalID)
        error = text(.error)
        deliveries = text(.deliveries).flatMap { Int($0) }
        failedAt = text(.failedAt).flatMap { Int($0) }
        attempts = text(.attempts).map(StreamAttempt.decode) ?? []
        original = fields.filter { !Self.ownFields.contains($0.key) }
    }

    /// The failure class of `error` when it was recorded in the `class<TAB>message` form.
    public func failure<Class: StreamFailureClass>(as: Class.Type) -> StreamFailure<Class>? {
        error.flatMap(StreamFailure<Class>.init(recorded:))
    }

    /// Moves an entry to the dead-letter stream with its last error and its attempts, then acks and deletes it, and
    /// trims the dead letters to their retention bounds; returns how many old dead letters the trim removed. An entry
    /// with no recorded error (a handler that gave it up, a message that did not decode, a consumer that died each
    /// time) gets the consumer's error as its last attempt. Under OOM the XADD, its first write, is refused and nothing
    /// changes: the entry stays pending.
    static let script = RedisScript(
        name: "worker-dead-letter",
        source: """
            -- KEYS[1]: stream, KEYS[2]: dead-letter stream, KEYS[3]: errors hash
            -- ARGV[1]: group, ARGV[2]: entry id, ARGV[3]: deliveries, ARGV[4]: error if none recorded, ARGV[5]: now (ms),
            -- ARGV[6]: dead letters kept at most, ARGV[7]: the oldest id kept (ms of the age bound), ARGV[8]: the attempt
            -- (`StreamAttempt.line`) recorded when none was, ARGV[9]: attempts kept
            -- KEYS[4], ARGV[10], ARGV[11] (a stream that keeps its load, `StreamLoad`): load hash, owner field, size field
            \(StreamLoad.releaseFunction)
            \(StreamAttempt.appendFunction)
            if KEYS[4] then release(KEYS[1], KEYS[4], ARGV[2], ARGV[10], ARGV[11]) end
            local entry = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
            local attemptsField = ARGV[2] .. '\(StreamAttempt.suffix)'
            local err = redis.call('HGET', KEYS[3], ARGV[2])
            local attempts = redis.call('HGET', KEYS[3], attemptsField)
            if not err then
              err = ARGV[4]
              attempts = withAttempt(attempts, ARGV[8], tonumber(ARGV[9]))
            end
            local fields = {}
            if entry[1] then fields = entry[1][2] end
            table.insert(fields, '\(Field.originalID.rawValue)'); table.insert(fields, ARGV[2])
            table.insert(fields, '\(Field.error.rawValue)'); table.insert(fields, err)
            table.insert(fields, '\(Field.deliveries.rawValue)'); table.insert(fields, ARGV[3])
            table.insert(fields, '\(Field.failedAt.rawValue)'); table.insert(fields, ARGV[5])
            if attempts then table.insert(fields, '\(Field.attempts.rawValue)'); table.insert(fields, attempts) end
            redis.call('XADD', KEYS[2], '*', unpack(fields))
            redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
            redis.call('XDEL', KEYS[1], ARGV[2])
            redis.call('HDEL', KEYS[3], ARGV[2], attemptsField)
            -- Retention, like Sidekiq's dead set: at most ARGV[6] letters, none older than ARGV[7] (a stream id).
            local trimmed = redis.call('XTRIM', KEYS[2], 'MAXLEN', ARGV[6])
            trimmed = trimmed + redis.call('XTRIM', KEYS[2], 'MINID', ARGV[7])
            return trimmed
            """)
}
