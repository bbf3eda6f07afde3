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
        (reply.array ?? []).compactMap { item in
            guard let pair = item.array, pair.count == 2, let id = pair[0].string else { return nil }
            var fields: [String: [UInt8]] = [:]
            let flat = pair[1].array ?? []
            var index = 0
            while index + 1 < flat.count {
                if let name = flat[index].string { fields[name] = flat[index + 1].bytes ?? [] }
                index += 2
            }
            return StreamEntry(id: id, fields: fields)
        }
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
