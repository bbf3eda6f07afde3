public import GRDB
public import RoundupCore
public import RoundupStore

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

extension Row: StoredRow {
    package func text(_ column: Int) throws -> String { try decode(String.self, atIndex: column) }
    package func optionalText(_ column: Int) throws -> String? { try decode(String?.self, atIndex: column) }
    package func int64(_ column: Int) throws -> Int64 { try decode(Int64.self, atIndex: column) }
    package func bool(_ column: Int) throws -> Bool { try decode(Bool.self, atIndex: column) }
}

/// SQLite's result codes, classified once here: constraint (a trigger's `RAISE(ABORT, …)` included), type mismatch,
/// too big and range errors are the values' fault; the generic error (no such table or column) the statement's.
extension DatabaseError: StoreClassifiedError {
    public var storeFailure: StoreFailure {
        switch resultCode {
        case .SQLITE_CONSTRAINT, .SQLITE_MISMATCH, .SQLITE_TOOBIG, .SQLITE_RANGE: .data
        case .SQLITE_ERROR: .statement
        default: .unavailable
        }
    }
}
