/// A W3C trace context (`traceparent`, and `tracestate` when there is one) as a stream message carries it from the
/// process that wrote the message to the one that handles it: the ingress's enqueue to the worker, a worker's batch to
/// the pusher, a `/sync` request to its job. Made only from a valid `traceparent` (the version-00 form), so what a
/// client sends cannot put anything else in a message; `tracestate` is kept as sent, up to the 512 characters the
/// specification allows, and dropped beyond.
public struct TraceHeaders: Sendable, Hashable {
    /// Its fields in a stream entry, under the names of the HTTP headers.
    public enum Field: String, CaseIterable, Sendable {
        case traceparent, tracestate
    }

    public let traceparent: String
    public let tracestate: String?

    public init?(traceparent: String?, tracestate: String? = nil) {
        guard let traceparent, Self.isValid(traceparent: traceparent) else { return nil }
        self.traceparent = traceparent
        self.tracestate = tracestate.flatMap { state in
            state.utf8.count <= 512 && !state.isEmpty && state.utf8.allSatisfy { (0x20...0x7E).contains($0) } ? state : nil
        }
    }

    /// `00-<32 hex, not all zero>-<16 hex, not all zero>-<2 hex>`, lower case.
    public static func isValid(traceparent: String) -> Bool {
        let bytes = Array(traceparent.utf8)
        guard bytes.count == 55, bytes[0] == UInt8(ascii: "0"), bytes[1] == UInt8(ascii: "0"), bytes[2] == UInt8(ascii: "-"),
            bytes[35] == UInt8(ascii: "-"), bytes[52] == UInt8(ascii: "-")
        else { return false }
        func hex(_ range: Range<Int>) -> Bool {
            bytes[range].allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
        }
        func nonZero(_ range: Range<Int>) -> Bool { bytes[range].contains { $0 != UInt8(ascii: "0") } }
        return hex(3..<35) && nonZero(3..<35) && hex(36..<52) && nonZero(36..<52) && hex(53..<55)
    }

    /// The trace id (32 hex digits).
    public var traceID: Substring { traceparent.dropFirst(3).prefix(32) }
    /// The id of the span that wrote the message (16 hex digits).
    public var spanID: Substring { traceparent.dropFirst(36).prefix(16) }

    /// As a carrier's headers (`traceparent`, `tracestate`).
    public var headers: [String: String] {
        var headers = [Field.traceparent.rawValue: traceparent]
        if let tracestate { headers[Field.tracestate.rawValue] = tracestate }
        return headers
    }
}
