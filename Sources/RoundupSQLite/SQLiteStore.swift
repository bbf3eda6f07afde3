import Foundation
import GRDB
import GRDBSQLite
public import RoundupCore
public import RoundupStore
public import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The embedded store: one SQLite file in WAL mode, through GRDB. Several processes on one machine may share it.
public final class SQLiteStore: SyncStore {
    let pool: DatabasePool

    /// Opens the file without the start-up lock: `open(path:)` is the way for processes that may start together.
    public init(path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) }
        var configuration = Configuration()
        // Other processes (workers, the API) write too: wait for their transactions rather than fail.
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            // WAL comes with DatabasePool; FULL makes every acknowledged event's row survive a power cut.
            try db.execute(sql: "PRAGMA synchronous = FULL")
            // Reads through a memory map instead of a read() per page, and a bigger page cache per connection.
            try db.execute(sql: "PRAGMA mmap_size = 268435456")
            try db.execute(sql: "PRAGMA cache_size = -16384")
        }
        pool = try DatabasePool(path: path, configuration: configuration)
        // Opening the pool switched the writer to WAL, and GRDB sets `synchronous = NORMAL` with it: back to FULL.
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
    }

    /// Opens and migrates the store at `path` under the start-up lock (see `SQLiteStartupLock`): switching a fresh
    /// file to WAL takes an exclusive lock, and SQLite answers "database is locked" at once (no busy wait) to a
    /// second process doing the same, so processes starting together open and migrate one after the other.
    public static func open(path: String) async throws -> SQLiteStore {
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) }
        return try await SQLiteStartupLock.withLock(databasePath: path) {
            let store = try SQLiteStore(path: path)
            try SQLiteMigrations.migrator.migrate(store.pool)
            return store
        }
    }

    /// Applies the migrations not applied yet. GRDB's migrator reads the applied ones before it runs each in its own
    /// transaction, and serialises only within a process: two processes starting together on a fresh file would both
    /// run the first migration (`table accounts already exists`). An exclusive lock on `<path>.migrate.lock`, held
    /// while migrating, makes them take turns; the second finds everything applied.
    /// Nothing runs beside a SQLite store.
    public var service: (any Service)? { nil }

    public func migrate() async throws {
        try await SQLiteStartupLock.withLock(databasePath: pool.path) { [pool] in
            try SQLiteMigrations.migrator.migrate(pool)
        }
    }

    /// The names of the tables, for tests and `roundupctl`.
    public func tableNames() async throws -> [String] {
        try await pool.read { db in
            try String.fetchAll(
                db,
                sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'grdb_migrations' ORDER BY name")
        }
    }

    public func journalMode() async throws -> String {
        try await pool.read { db in try String.fetchOne(db, sql: "PRAGMA journal_mode") ?? "" }
    }

    /// The writer's `PRAGMA synchronous` (2: FULL), for tests.
    public func writerSynchronous() async throws -> Int {
        try await pool.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    // MARK: Accounts and lists

    public func createAccount(authTokenHash: String) async throws -> String {
        let id = Hex.lowercase(UUID())
        let now = Timestamp.now()
        try await pool.write { db in
            try db.execute(
                sql: "INSERT INTO accounts (id, auth_token_hash, webhook_token, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
                arguments: [id, authTokenHash, WebhookCallback.makeToken(), now, now])
        }
        return id
    }

    public func account(id: String) async throws -> AccountRecord? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT \(AccountRecord.columns) FROM accounts WHERE id = ?", arguments: [id]).map(AccountRecord.init(stored:))
        }
    }

    public func insertSyncList(_ list: SyncListRecord) async throws {
        do {
            try await pool.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO sync_lists (id, account_id, name, trello_board_id, trello_list_id, created_at, updated_at, settings, trello_list_name)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        list.id, list.accountID, list.name, list.trelloBoardID, list.trelloListID, list.createdAt, list.createdAt,
                        list.settings.storedText, list.trelloListName,
                    ])
            }
        } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE {
            throw StoreError.duplicateList
        }
    }

    // MARK: The worker's batch

    public func lookup(_ items: [BatchLookup]) async throws -> BatchContext {
        try await pool.read { db in
            var context = BatchContext()
            var accounts = Set<String>()
            // Whether each task's list filters its cards, its settings parsed once per batch.
            var listFiltered: [String: Bool] = [:]
            for item in items {
                accounts.insert(item.accountID)
                for listID in item.listIDs where context.lists[AccountScoped(item.accountID, listID)] == nil {
                    if let row = try Row.fetchOne(
                        db.cachedStatement(
                            sql: "SELECT id, name, trello_board_id, created_at, settings FROM sync_lists WHERE account_id = ? AND trello_list_id = ?"),
                        arguments: [item.accountID, listID])
                    {
                        context.lists[AccountScoped(item.accountID, listID)] = SyncListRecord(
                            id: row[0], accountID: item.accountID, name: row[1], trelloBoardID: row[2], trelloListID: listID, createdAt: row[3],
                            settings: SyncSettings(stored: row[4]))
                    }
                }
                if let board = item.boardID, !context.boards.contains(AccountScoped(item.accountID, board)) {
                    if try Bool.fetchOne(
                        db.cachedStatement(sql: "SELECT 1 FROM sync_lists WHERE account_id = ? AND trello_board_id = ? LIMIT 1"),
                        arguments: [item.accountID, board]) == true
                    {
                        context.boards.insert(AccountScoped(item.accountID, board))
                        if let field = try Self.priorityField(db, accountID: item.accountID, boardID: board) {
                            context.priorityFields[AccountScoped(item.accountID, board)] = field
                        }
                    }
                }
                let taskKey = AccountScoped(item.accountID, item.cardID)
                if context.tasks[taskKey] == nil,
                    let row = try db.first(
                        """
                        SELECT t.sync_list_id, t.deleted, l.settings FROM sync_tasks t LEFT JOIN sync_lists l ON l.id = t.sync_list_id
                        WHERE t.account_id = ? AND t.trello_card_id = ?
                        """, [item.accountID, item.cardID],
                        { cells in (syncListID: try cells.text(0), deleted: try cells.bool(1), settings: try cells.optionalText(2)) })
                {
                    let filtered = listFiltered[row.syncListID] ?? !SyncSettings(stored: row.settings).filter.isEmpty
                    listFiltered[row.syncListID] = filtered
                    context.tasks[taskKey] = TaskState(syncListID: row.syncListID, deleted: row.deleted, listFiltered: filtered)
                }
            }
            for account in accounts {
                if let row = try Row.fetchOne(db, sql: "SELECT trello_api_key, trello_token FROM accounts WHERE id = ?", arguments: [account]),
                    let key: String = row[0], let token: String = row[1]
                {
                    context.credentials[account] = TrelloCredentials(apiKey: key, token: token)
                }
            }
            return context
        }
    }

    static func priorityField(_ db: Database, accountID: String, boardID: String) throws -> PriorityField? {
        guard
            let row = try Row.fetchOne(
                db,
                sql:
                    "SELECT trello_field_id, options FROM sync_custom_fields WHERE account_id = ? AND trello_board_id = ? AND lower(name) = 'priority'",
                arguments: [accountID, boardID])
        else { return nil }
        return PriorityField(fieldID: row[0], storedOptions: row[1])
    }

    public func savePriorityField(accountID: String, boardID: String, field: PriorityField?) async throws {
        guard let field else { return }
        let options = field.storedOptions
        let now = Timestamp.now()
        try await pool.write { db in
            try db.execute(
                sql: """
                    INSERT INTO sync_custom_fields (account_id, trello_board_id, trello_field_id, name, type, options, fetched_at)
                    VALUES (?, ?, ?, 'Priority', 'list', ?, ?)
                    ON CONFLICT (account_id, trello_board_id, trello_field_id) DO UPDATE SET options = excluded.options, fetched_at = excluded.fetched_at
                    """,
                arguments: [accountID, boardID, field.fieldID, options, now])
        }
    }

    @discardableResult
    public func apply(_ observations: [CardObservation]) async throws -> AppliedChanges {
        guard !observations.isEmpty else { return AppliedChanges() }
        return try await pool.write { db in
            var applier = ChangeApplier(rows: SQLiteChangeRows(db: db))
            for observation in observations { try applier.apply(observation) }
            return AppliedChanges(written: applier.written, accounts: applier.accounts, types: applier.types)
        }
    }

    // MARK: Reading changes

    public func pendingChanges<Sink: PendingChangeSink>(accountID: String, afterID: Int64, limit: Int, into sink: Sink) async throws -> Sink {
        try await pool.read { db in
            try Self.changes(
                db, sink,
                sql: """
                    SELECT \(PendingChange.columns) FROM pending_changes p
                    WHERE p.account_id = ? AND p.superseded = 0 AND p.id > ? ORDER BY p.id LIMIT ?
                    """,
                arguments: [accountID, afterID, limit])
        }
    }

    public func claimChanges<Sink: PendingChangeSink>(
        accountID: String, claim: ChangeClaim, afterID: Int64, limit: Int, into sink: Sink
    ) async throws
        -> Sink?
    {
        let free = Self.free
        let device = "SELECT 1 FROM devices WHERE account_id = ? AND device_id = ?"
        // Most wake-ups of an account's streams find nothing free (the device the change went to holds it): a read says
        // so without taking the one writer's lock that the worker's batches need. Something free, the write reads it
        // again and hands it over.
        let anyFree = try await pool.read { db -> Bool? in
            guard try Bool.fetchOne(db.cachedStatement(sql: device), arguments: [accountID, claim.deviceID]) ?? false else { return nil }
            return try Bool.fetchOne(
                db.cachedStatement(
                    sql:
                        "SELECT 1 FROM pending_changes p WHERE p.account_id = ? AND p.superseded = 0 AND p.id > ? AND p.id <= ? AND \(free("p.")) LIMIT 1"
                ),
                arguments: [accountID, afterID, claim.throughID, claim.now, claim.deviceID, claim.includeOwn, claim.deviceID, claim.now]) ?? false
        }
        guard let anyFree else { return nil }
        guard anyFree else { return sink }
        return try await pool.write { db in
            guard try Bool.fetchOne(db.cachedStatement(sql: device), arguments: [accountID, claim.deviceID]) ?? false else { return nil }
            let read = try Self.changes(
                db, sink,
                sql: """
                    SELECT \(PendingChange.columns) FROM pending_changes p
                    WHERE p.account_id = ? AND p.superseded = 0 AND p.id > ? AND p.id <= ? AND \(free("p.")) ORDER BY p.id LIMIT ?
                    """,
                arguments: [accountID, afterID, claim.throughID, claim.now, claim.deviceID, claim.includeOwn, claim.deviceID, claim.now, limit])
            if read.lastTaken > afterID {
                try db.cachedStatement(
                    sql: """
                        UPDATE pending_changes SET claimed_by = ?, claimed_until = ?
                        WHERE account_id = ? AND superseded = 0 AND id > ? AND id <= ? AND \(free(""))
                        """
                ).execute(arguments: [
                    claim.deviceID, claim.until, accountID, afterID, min(read.lastTaken, claim.throughID), claim.now, claim.deviceID,
                    claim.includeOwn, claim.deviceID, claim.now,
                ])
            }
            return read
        }
    }

    /// The changes no other device holds (the same test in every statement of `claimChanges`; in its write, in one
    /// transaction: the rows the update hands over are the ones read). A change the device gave back (`declined_by`)
    /// is not its own again until the hold it gave back lapses.
    private static func free(_ p: String) -> String {
        "(\(p)claimed_by IS NULL OR \(p)claimed_until <= ? OR (\(p)claimed_by = ? AND ?)) AND (\(p)declined_by IS NULL OR \(p)declined_by <> ? OR \(p)claimed_until <= ?)"
    }

    public func releaseClaims(accountID: String, deviceID: String, ids: [Int64]?, declinedUntil: Int64) async throws -> Int {
        try await pool.write { db in
            // The live change of each card named (a change folded into a newer one passed its hold on to it).
            let release = """
                UPDATE pending_changes SET claimed_by = NULL, claimed_until = ?, declined_by = ?
                WHERE account_id = ? AND claimed_by = ? AND superseded = 0
                """
            if let ids {
                var released = 0
                for id in ids {
                    try db.cachedStatement(
                        sql: release + " AND trello_card_id IN (SELECT trello_card_id FROM pending_changes WHERE account_id = ? AND id = ?)"
                    ).execute(arguments: [declinedUntil, deviceID, accountID, deviceID, accountID, id])
                    released += db.changesCount
                }
                return released
            }
            try db.cachedStatement(sql: release).execute(arguments: [declinedUntil, deviceID, accountID, deviceID])
            return db.changesCount
        }
    }

    public func accountsWithLapsedHolds(after: Int64, through: Int64) async throws -> [String] {
        try await pool.read { db in
            try String.fetchAll(
                db,
                sql: """
                    SELECT DISTINCT account_id FROM pending_changes
                    WHERE claimed_until IS NOT NULL AND claimed_until > ? AND claimed_until <= ? AND superseded = 0
                    """, arguments: [after, through])
        }
    }

    /// The changes a query of `PendingChange.columns` selects, given to `sink` as their row is read: the hottest read of
    /// the API (`GET /changes`) takes each text column from SQLite in place (`sqlite3_column_text`), where GRDB's
    /// decoding would make a `String` of it first.
    static func changes<Sink: PendingChangeSink>(_ db: Database, _ sink: Sink, sql: String, arguments: StatementArguments) throws -> Sink {
        let statement = try db.cachedStatement(sql: sql)
        let rows = try Row.fetchCursor(statement, arguments: arguments)
        var sink = sink
        while !sink.isFull, try rows.next() != nil { sink.take(try PendingChangeCells(statement.sqliteStatement)) }
        return sink
    }

    /// Every pending change of every account, oldest first (tests and operators).
    public func allPendingChanges() async throws -> [PendingChange] {
        let accounts = try await pool.read { db in try String.fetchAll(db, sql: "SELECT DISTINCT account_id FROM pending_changes") }
        var all: [PendingChange] = []
        for account in accounts { all += try await pendingChanges(accountID: account, afterID: 0, limit: Int.max) }
        return all.sorted { $0.id < $1.id }
    }

    public func routingSnapshot() async throws -> RoutingSnapshot {
        try await pool.read { db in
            var secrets: [String: String] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT id, trello_webhook_secret FROM accounts WHERE trello_webhook_secret IS NOT NULL") {
                secrets[row[0]] = row[1]
            }
            var routes: [String: Set<String>] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT account_id, trello_list_id, trello_board_id FROM sync_lists") {
                routes[row[1], default: []].insert(row[0])
                routes[row[2], default: []].insert(row[0])
            }
            var tokens: [String: String] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT id, webhook_token FROM accounts WHERE webhook_token IS NOT NULL") {
                tokens[row[0]] = row[1]
            }
            return RoutingSnapshot(secrets: secrets, routes: routes, tokens: tokens)
        }
    }
}

/// An exclusive `flock` on a sidecar file, `<database>.migrate.lock`, so processes sharing one SQLite file migrate
/// one at a time. The kernel releases it when its holder exits, even by a crash: a lock left behind cannot exist.
/// It has the reach of SQLite's own WAL locks (processes on one machine), which the store needs anyway. Waiting
/// polls (no thread is blocked) and gives up after `timeout`, naming the file.
enum SQLiteStartupLock {
    static func withLock<T: Sendable>(
        databasePath: String, timeout: Duration = .seconds(120), _ body: @Sendable () throws -> T
    ) async throws -> T {
        let lockPath = databasePath + ".migrate.lock"
        // Read-only is enough for flock, so processes of other users that may read the file can take it too.
        let descriptor = open(lockPath, O_RDONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw SQLiteStartupLockError(path: lockPath, problem: "cannot open it (errno \(errno))") }
        defer { close(descriptor) }
        let deadline = ContinuousClock.now + timeout
        while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            guard code == EWOULDBLOCK || code == EINTR else {
                throw SQLiteStartupLockError(path: lockPath, problem: "cannot lock it (errno \(code))")
            }
            guard ContinuousClock.now < deadline else {
                throw SQLiteStartupLockError(path: lockPath, problem: "another process held it for \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        defer { flock(descriptor, LOCK_UN) }
        return try body()
    }
}

public struct SQLiteStartupLockError: Error, CustomStringConvertible, Sendable {
    public let path: String
    public let problem: String
    public var description: String { "sqlite migration lock \(path): \(problem)" }
}

extension PendingChangeCells {
    /// The row a statement of `PendingChange.columns` stands on, its text as SQLite holds it: valid until the statement
    /// steps again.
    init(_ statement: SQLiteStatement) throws {
        try self.init(id: sqlite3_column_int64(statement, 0)) { column in
            // Text first, then its length (SQLite's advice); a NULL has no text.
            guard let start = sqlite3_column_text(statement, Int32(column)) else { return nil }
            return UTF8Cell(UnsafeBufferPointer(start: start, count: Int(sqlite3_column_bytes(statement, Int32(column)))))
        }
    }
}

extension SQLiteStore: OperatorStore {}
