import RoundupRedis

/// One stream entry as the worker reads it.
public struct StreamEntry: Sendable {
    public var id: String
    public var fields: [String: [UInt8]]

    public init(id: String, fields: [String: [UInt8]]) {
        self.id = id
        self.fields = fields
    }

    public func string(_ name: String) -> String? { fields[name].map { String(decoding: $0, as: UTF8.self) } }

    /// Parses an XREADGROUP/XCLAIM reply: `[[id, [field, value, ...]], ...]` (deleted entries have nil fields).
    static func parse(entries reply: RedisValue) -> [StreamEntry] {
        reply.streamEntries.map { StreamEntry(id: $0.id, fields: $0.fields) }
    }

    /// Parses an XREADGROUP reply: `[[stream, entries]]`, or nil on timeout.
    static func parse(read reply: RedisValue) -> [StreamEntry] {
        guard let streams = reply.array else { return [] }
        return streams.flatMap { stream -> [StreamEntry] in
            guard let pair = stream.array, pair.count == 2 else { return [] }
            return parse(entries: pair[1])
        }
    }
}
