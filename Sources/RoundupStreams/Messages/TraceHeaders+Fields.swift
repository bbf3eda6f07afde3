public import RoundupCore

/// A trace context in a stream entry: the fields `traceparent` and `tracestate`, under the names of the HTTP headers.
extension TraceHeaders {
    /// From a stream entry's fields; nil when it carries none (or not a valid one).
    public init?(fields: [String: [UInt8]]) {
        self.init(traceparent: fields.text(Field.traceparent), tracestate: fields.text(Field.tracestate))
    }

    /// Appends the fields of a stream entry.
    public func append(to fields: inout [(name: String, value: [UInt8])]) {
        fields.append(Field.traceparent, traceparent)
        if let tracestate { fields.append(Field.tracestate, tracestate) }
    }
}
