/// A stored text that must be one of a domain enum's values; anything else is a damaged row, not a guess.
public struct UnknownStoredValue: StoreClassifiedError, CustomStringConvertible, Sendable {
    public var type: String
    public var value: String
    public var description: String { "stored value \(value.debugDescription) is not a \(type)" }
    /// A damaged row reads the same on every try: the values' fault, so the entry that met it is isolated, not retried.
    public var storeFailure: StoreFailure { .data }
}

extension RawRepresentable where RawValue == String {
    /// The value a column holds, or `UnknownStoredValue`.
    public static func stored(_ text: String) throws -> Self {
        guard let value = Self(rawValue: text) else { throw UnknownStoredValue(type: "\(Self.self)", value: text) }
        return value
    }
}
