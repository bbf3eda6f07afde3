public import GRDB
import RoundupCore

// Stored as their raw text on both stores: GRDB converts raw-representable values itself (`ChangeType`, read once per
// row of the changes page, also straight from the SQLite statement); the PostgreSQL store reads
// the text and asks `stored(_:)` (a text that is none of the values fails the row; the CHECK constraints keep such
// text out).
extension ChangeType: DatabaseValueConvertible, StatementColumnConvertible {}
extension SyncOp: DatabaseValueConvertible {}
extension JobKind: DatabaseValueConvertible {}
extension JobStatus: DatabaseValueConvertible {}
extension ConflictPolicy: DatabaseValueConvertible {}
extension DeleteMode: DatabaseValueConvertible {}
extension ConflictStatus: DatabaseValueConvertible {}
extension ConflictChoice: DatabaseValueConvertible {}
extension DuplicateStatus: DatabaseValueConvertible {}
extension DevicePlatform: DatabaseValueConvertible {}
extension APNsEnvironment: DatabaseValueConvertible {}
extension AttentionReason: DatabaseValueConvertible {}
extension ActivityKind: DatabaseValueConvertible {}
extension SyncSide: DatabaseValueConvertible {}
extension ConflictRule: DatabaseValueConvertible {}

/// A stored text that must be one of a domain enum's values; anything else is a damaged row, not a guess.
public struct UnknownStoredValue: Error, CustomStringConvertible, Sendable {
    public var type: String
    public var value: String
    public var description: String { "stored value \(value.debugDescription) is not a \(type)" }
}

extension RawRepresentable where RawValue == String {
    /// The value a column holds, or `UnknownStoredValue`.
    public static func stored(_ text: String) throws -> Self {
        guard let value = Self(rawValue: text) else { throw UnknownStoredValue(type: "\(Self.self)", value: text) }
        return value
    }
}
