import RoundupCore

/// A message carried on a Redis stream. Its type is the only code that names or reads its fields: writers append
/// `fields`, readers decode `init(fields:)`.
public protocol StreamMessage: Sendable {
    /// Reads a message from a stream entry's fields; nil when a field it cannot do without is missing.
    init?(fields: [String: [UInt8]])
    /// Its fields, in the order they are appended.
    var fields: [(name: String, value: [UInt8])] { get }
}

extension Dictionary where Key == String, Value == [UInt8] {
    /// A stream entry's field as text; `name` is a message's `Field`.
    public func text(_ name: some RawRepresentable<String>) -> String? { self[name.rawValue].map { String(decoding: $0, as: UTF8.self) } }
}

extension Array where Element == (name: String, value: [UInt8]) {
    mutating func append(_ name: some RawRepresentable<String>, _ text: String) { append((name: name.rawValue, value: [UInt8](text.utf8))) }
}
