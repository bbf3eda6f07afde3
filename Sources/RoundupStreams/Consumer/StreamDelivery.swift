package import RoundupRedis

/// One stream entry as a consumer receives it: its id and its fields, read by the typed message of its stream.
package struct StreamDelivery: Sendable, Equatable {
    package var id: String
    package var fields: [String: [UInt8]]

    package init(id: String, fields: [String: [UInt8]]) {
        self.id = id
        self.fields = fields
    }
}

/// An entry waiting in a consumer group's pending list: delivered, not yet acknowledged.
package struct StreamPendingEntry: Sendable, Equatable {
    package var id: String
    /// How many times the group has delivered it (reads and claims).
    package var deliveries: Int

    package init(id: String, deliveries: Int) {
        self.id = id
        self.deliveries = deliveries
    }
}

/// An entry to append to another stream when a batch is settled (a push asked for by new changes).
package struct StreamAppend: Sendable, Equatable {
    package var stream: String
    /// Approximate bound of the stream (`MAXLEN ~`); nil for none.
    package var maxLength: Int?
    package var fields: [(name: String, value: [UInt8])]

    package init(stream: String, maxLength: Int? = nil, fields: [(name: String, value: [UInt8])]) {
        self.stream = stream
        self.maxLength = maxLength
        self.fields = fields
    }

    package static func == (a: StreamAppend, b: StreamAppend) -> Bool {
        a.stream == b.stream && a.maxLength == b.maxLength && a.fields.elementsEqual(b.fields) { $0.name == $1.name && $0.value == $1.value }
    }

    /// The `XADD` that appends it.
    package var command: RedisCommand { RedisCommand.streamAppend(stream, maxLength: maxLength, fields: fields) }
}

extension RedisCommand {
    /// `XADD stream [MAXLEN ~ n] * field value …`: how a typed message goes onto its stream.
    package static func streamAppend(_ stream: String, maxLength: Int? = nil, fields: [(name: String, value: [UInt8])]) -> RedisCommand {
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
package struct StreamStats: Sendable, Equatable {
    package var length: Int?
    package var pending: Int?
    /// Milliseconds since 1970 of the oldest pending entry (its id starts with them); nil when none is pending.
    package var oldestPendingMilliseconds: Double?
    /// Entries not yet delivered to the group (Redis 7+).
    package var lag: Int?
    /// Milliseconds since 1970 of the oldest entry not yet delivered to the group; nil when none waits.
    package var oldestWaitingMilliseconds: Double?
    package var deadLetters: Int?

    /// The milliseconds since 1970 a Redis stream id starts with (`1700000000000-0`, or a sharded stream's
    /// `7:1700000000000-0`): when the entry was added.
    package static func milliseconds(ofID id: String) -> Double? {
        let local = id.lastIndex(of: ":").map { id[id.index(after: $0)...] } ?? id[...]
        return Double(local.split(separator: "-").first ?? "")
    }

    package init(length: Int? = nil, pending: Int? = nil, oldestPendingMilliseconds: Double? = nil, lag: Int? = nil, deadLetters: Int? = nil) {
        self.length = length
        self.pending = pending
        self.oldestPendingMilliseconds = oldestPendingMilliseconds
        self.lag = lag
        self.deadLetters = deadLetters
    }
}
