public import GRDB
import GRDBSQLite
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

/// The row a statement stands on, read in place (`sqlite3_column_*`): for the worker's reads of one row per card, where
/// GRDB's `Row` would first build a dictionary of the statement's column names and copy every value (a third of each
/// read's instructions). Valid until the statement steps again or is reset (`Database.first`).
struct StatementCells: StoredRow {
    let statement: SQLiteStatement

    func text(_ column: Int) throws -> String {
        guard let text = try optionalText(column) else { throw UnknownStoredValue.unexpected("text", "NULL") }
        return text
    }

    func optionalText(_ column: Int) throws -> String? {
        // Text first, then its length (SQLite's advice); a NULL has no text.
        guard let start = sqlite3_column_text(statement, Int32(column)) else { return nil }
        return String(decoding: UnsafeBufferPointer(start: start, count: Int(sqlite3_column_bytes(statement, Int32(column)))), as: UTF8.self)
    }

    func int64(_ column: Int) throws -> Int64 {
        guard sqlite3_column_type(statement, Int32(column)) != SQLITE_NULL else { throw UnknownStoredValue.unexpected("integer", "NULL") }
        return sqlite3_column_int64(statement, Int32(column))
    }

    func bool(_ column: Int) throws -> Bool { try int64(column) != 0 }
}

extension Database {
    /// The first row `sql` selects, made by `make` from the statement's cells (`StatementCells`); nil when there is none.
    func first<Value>(_ sql: String, _ arguments: StatementArguments, _ make: (StatementCells) throws -> Value) throws -> Value? {
        let statement = try cachedStatement(sql: sql)
        let cursor = try FirstRowCursor(statement, arguments: arguments)
        guard try cursor.next() != nil else { return nil }
        return try make(StatementCells(statement: statement.sqliteStatement))
    }
}

/// Steps a statement for `Database.first` through GRDB (its errors, its checks): GRDB's own plain cursor cannot be
/// made outside it.
private final class FirstRowCursor: DatabaseCursor {
    typealias Element = Void
    let _statement: Statement
    var _isDone = false

    init(_ statement: Statement, arguments: StatementArguments) throws {
        _statement = statement
        try statement.setArguments(arguments)  // resets it, binds the arguments and checks their count
    }

    func _element(sqliteStatement: SQLiteStatement) {}

    // As GRDB's cursors end: the statement reset, no longer busy.
    deinit { sqlite3_reset(_statement.sqliteStatement) }
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
