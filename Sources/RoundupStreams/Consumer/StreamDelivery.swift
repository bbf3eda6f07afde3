public import RoundupRedis

/// One stream entry as a consumer receives it: its id and its fields, read by the typed message of its stream.
public struct StreamDelivery: Sendable, Equatable {
    public var id: String
    public var fields: [String: [UInt8]]

    public init(id: String, fields: [String: [UInt8]]) {
        self.id = id
        self.fields = fields
    }
}

/// An entry waiting in a consumer group's pending list: delivered, not yet acknowledged.
public struct StreamPendingEntry: Sendable, Equatable {
    public var id: String
    /// How many times the group has delivered it (reads and claims).
    public var deliveries: Int

    public init(id: String, deliveries: Int) {
        self.id = id
        self.deliveries = deliveries
    }
}

/// An entry to append to another stream when a batch is settled (a push asked for by new changes).
public struct StreamAppend: Sendable, Equatable {
    public var stream: String
    /// Approximate bound of the stream (`MAXLEN ~`); nil for none.
    public var maxLength: Int?
    public var fields: [(name: String, value: [UInt8])]

    public init(stream: String, maxLength: Int? = nil, fields: [(name: String, value: [UInt8])]) {
        self.stream = stream
        self.maxLength = maxLength
        self.fields = fields
    }

    public static func == (a: StreamAppend, b: StreamAppend) -> Bool {
        a.stream == b.stream && a.maxLength == b.maxLength && a.fields.elementsEqual(b.fields) { $0.name == $1.name && $0.value == $1.value }
    }

    /// The `XADD` that appends it.
    public var command: RedisCommand { RedisCommand.streamAppend(stream, maxLength: maxLength, fields: fields) }
}

extension RedisCommand {
    /// `XADD stream [MAXLEN ~ n] * field value …`: how a typed message goes onto its stream.
    public static func streamAppend(_ stream: String, maxLength: Int? = nil, fields: [(name: String, value: [UInt8])]) -> RedisCommand {
        var arguments: [RedisArgument] = [RedisArgument(stream)]
        arguments.reserveCapacity(4 + fields.count * 2)
        if let maxLength { arguments += ["MAXLEN", "~", RedisArgument(maxLength)] }
        arguments.append("*")
        for field in fields {
            arguments.append(RedisArgument(field.name))
            arguments.append(RedisArgument(bytes: field.value))
        }
        return RedisCommand("XADD", arguments)
    }
}

/// What a stream and its consumer group look like, for the `roundup_stream_*` gauges.
public struct StreamStats: Sendable, Equatable {
    public var length: Int?
    public var pending: Int?
    /// Milliseconds since 1970 of the oldest pending entry (its id starts with them); nil when none is pending.
    public var oldestPendingMilliseconds: Double?
    /// Entries not yet delivered to the group (Redis 7+).
    public var lag: Int?
    /// Milliseconds since 1970 of the oldest entry not yet delivered to the group; nil when none waits.
    public var oldestWaitingMilliseconds: Double?
    public var deadLetters: Int?

    /// The milliseconds since 1970 a Redis stream id starts with (`1700000000000-0`, or a sharded stream's
    /// `7:1700000000000-0`): when the entry was added.
    public static func milliseconds(ofID id: String) -> Double? {
        let local = id.lastIndex(of: ":").map { id[id.index(after: $0)...] } ?? id[...]
        return Double(local.split(separator: "-").first ?? "")
    }

    public init(length: Int? = nil, pending: Int? = nil, oldestPendingMilliseconds: Double? = nil, lag: Int? = nil, deadLetters: Int? = nil) {
        self.length = length
        self.pending = pending
        self.oldestPendingMilliseconds = oldestPendingMilliseconds
        self.lag = lag
        self.deadLetters = deadLetters
    }
}
