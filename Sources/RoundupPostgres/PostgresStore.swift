import Foundation
public import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOSSL
public import PostgresNIO
public import RoundupCore
public import RoundupStore
public import ServiceLifecycle

/// The shared store: PostgreSQL through PostgresNIO's connection pool, for API and worker processes on several machines.
/// The same tables, columns and timestamp encoding (ISO-8601 text, UTC, milliseconds) as `SQLiteStore`, so both back
/// ends answer alike; flags are booleans here.
///
/// Concurrency: every write runs in one transaction, retried on serialization failures and deadlocks. Transactions
/// that write an account's tasks, changes, jobs or lease take a transaction-scoped advisory lock per account
/// (`lockAccounts`), always in one order, so two workers folding changes of one card run one after the other, one sync
/// job per account holds, and an account's change ids become visible in order.
public final class PostgresStore: Sendable {
    let client: PostgresClient
    let logger: Logger
    let timeout: Duration

    public init(
        url: PostgresURL, poolSize: Int = 10, caFile: String? = nil, timeout: Duration = .seconds(30),
        logger: Logger = Logger(label: "roundup.postgres")
    ) throws {
        self.timeout = timeout
        var tls: PostgresClient.Configuration.TLS
        switch url.tls {
        case .disable:
            tls = .disable
        case .prefer, .require:
            // libpq's meaning: encrypted, certificate not checked.
            var config = TLSConfiguration.makeClientConfiguration()
            config.certificateVerification = .none
            tls = url.tls == .prefer ? .prefer(config) : .require(config)
        case .verifyFull:
            var config = TLSConfiguration.makeClientConfiguration()
            if let caFile { config.trustRoots = .file(caFile) }
            tls = .require(config)
        }
        var configuration = PostgresClient.Configuration(
            host: url.host, port: url.port, username: url.username, password: url.password, database: url.database, tls: tls)
        configuration.options.maximumConnections = poolSize
        configuration.options.minimumConnections = min(2, poolSize)
        configuration.options.connectTimeout = .seconds(5)
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.client = client
        self.logger = logger
    }

    /// The connection pool, a service for the process's ServiceGroup: until it runs, queries wait for a connection.
    public var service: (any Service)? { client }

    // MARK: Transactions

    /// Runs `body` in one transaction on a pooled connection; a serialization failure (40001) or deadlock (40P01)
    /// rolls back and runs it again, up to eight times, with a short random pause.
    @discardableResult
    func write<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await withDeadlineConnection { [logger] connection in
                    _ = try await connection.query("BEGIN", logger: logger)  // READ COMMITTED; the account locks do the rest
                    do {
                        let result = try await body(connection)
                        _ = try await connection.query("COMMIT", logger: logger)
                        return result
                    } catch {
                        // A lost connection took its transaction with it, and a query sent on a closed connection never
                        // completes (PostgresNIO 1.33 writes it without a promise): no ROLLBACK then.
                        if !connection.isClosed, !Self.lostConnection(error) {
                            _ = try? await connection.query("ROLLBACK", logger: logger)
                        }
                        throw error
                    }
                }
            } catch let error as PSQLError where Self.isRetryable(error) && attempt < 8 {
                Self.retries.increment()
                try await Task.sleep(for: .milliseconds(Int.random(in: 1...(5 << min(attempt, 5)))))
            } catch {
                throw PostgresStoreError(error)
            }
        }
    }

    /// Runs `body` on a pooled connection without a transaction (single reads).
    func read<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        do {
            return try await withDeadlineConnection(body)
        } catch {
            throw PostgresStoreError(error)
        }
    }

    /// Leases a pooled connection and runs `operation` on it, giving up after `ROUNDUP_DATABASE_TIMEOUT_SECONDS` (waiting
    /// for the connection included): a worker whose query never returns (a connection lost in a way the pool has not
    /// noticed) fails its batch, which is retried, instead of holding it forever.
    ///
    /// Cancelling the operation is not enough: PostgresNIO's queries do not end when their task is cancelled, and a
    /// query written to a connection that has just closed never ends at all (seen when PostgreSQL restarts under load:
    /// the worker's batch waited forever). So the operation runs in a task of its own, and the deadline (or the
    /// caller's cancellation) answers the caller without waiting for it: the connection is closed, which fails what
    /// runs on it (the pool replaces it), and the task is cancelled, so an operation still waiting for a connection
    /// never starts.
    func withDeadlineConnection<T: Sendable>(_ operation: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let lease = DeadlineLease()
        let race = DeadlineRace<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let work = Task { [client] in
                    do {
                        let value = try await client.withConnection { connection in
                            try lease.hold(connection)
                            defer { lease.release() }
                            return try await operation(connection)
                        }
                        race.finish(.success(value))
                    } catch {
                        race.finish(.failure(error))
                    }
                }
                let timer = Task { [timeout] in
                    try? await Task.sleep(for: timeout)
                    guard !Task.isCancelled else { return }
                    if race.finish(.failure(PostgresStoreError(timeoutAfter: timeout))) {
                        lease.expire()
                        work.cancel()
                    }
                }
                race.start(continuation, work: work, timer: timer)
            }
        } onCancel: {
            if race.finish(.failure(CancellationError())) { lease.expire() }
        }
    }

    /// The connection is gone with this error (closed by either side, or the server ended the session).
    static func lostConnection(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError else { return false }
        switch error.code {
        case .clientClosedConnection, .serverClosedConnection, .connectionError, .uncleanShutdown: return true
        default: return ["FATAL", "PANIC"].contains(error.serverInfo?[.severity] ?? "")
        }
    }

    static func isRetryable(_ error: PSQLError) -> Bool {
        guard let state = error.serverInfo?[.sqlState] else { return false }
        return state == "40001" || state == "40P01"
    }

    static func sqlState(_ error: any Error) -> String? {
        (error as? PostgresStoreError)?.sqlState ?? (error as? PSQLError)?.serverInfo?[.sqlState]
    }

    static let retries = Counter(label: "roundup_store_transaction_retries_total")

    /// Takes, for the rest of the transaction, the advisory lock of each of these accounts, in one order.
    ///
    /// Every transaction that writes an account's tasks, changes, jobs or lease takes it first. Besides keeping two
    /// writers of one card or one job apart, it makes an account's `pending_changes` ids commit in the order they were
    /// drawn: an app pages with `after_id`, and without the lock a change with a smaller id could commit after the app
    /// had read past it. (Plain SERIALIZABLE was tried first for leases and jobs: with two dozen accounts syncing at once
    /// its predicate locks on shared index pages failed hundreds of unrelated transactions.)
    static func lockAccounts(_ connection: PostgresConnection, _ accountIDs: [String], logger: Logger) async throws {
        guard !accountIDs.isEmpty else { return }
        let ids = Set(accountIDs.map(Self.lockID)).sorted()
        try await connection.run("SELECT count(pg_advisory_xact_lock(k)) FROM unnest(\(ids)::int8[]) AS t(k)", logger)
    }

    /// The account lock of a job's account (a job never changes account, so reading it before the lock is safe).
    static func lockJobAccount(_ connection: PostgresConnection, jobID: String, logger: Logger) async throws {
        if let account = try await connection.rows("SELECT account_id FROM background_jobs WHERE id = \(jobID)", logger).first {
            try await lockAccounts(connection, [try account.text(0)], logger: logger)
        }
    }

    /// A stable 64-bit FNV-1a of the account id (Swift's `hashValue` changes from process to process).
    static func lockID(_ accountID: String) -> Int64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in accountID.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return Int64(bitPattern: hash)
    }

    // MARK: Migrations

    public func migrate() async throws {
        try await PostgresMigrations.migrate(self)
    }

    /// The names of the tables, for tests and `roundupctl`.
    public func tableNames() async throws -> [String] {
        try await read { [self] c in
            try await c.query(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename <> 'roundup_migrations' ORDER BY tablename",
                logger: logger
            ).collect().map { try $0.decode(String.self) }
        }
    }

    /// Migration versions applied, in order (by their number: "v10-…" comes after "v9-…").
    public func appliedMigrations() async throws -> [String] {
        try await read { [self] c in
            try await c.query(
                "SELECT version FROM roundup_migrations ORDER BY substring(version FROM '^v([0-9]+)')::int, version", logger: logger
            ).collect().map { try $0.decode(String.self) }
        }
    }
}

/// The connection one deadline-bound operation holds, so the deadline can close it.
// @unchecked: every access to `expired` and `connection` is under `lock`.
final class DeadlineLease: @unchecked Sendable {
    private let lock = NSLock()
    private var expired = false
    private var connection: PostgresConnection?

    /// Takes note of the leased connection; past the deadline (the lease came too late), throws instead.
    func hold(_ connection: PostgresConnection) throws {
        let late = lock.withLock {
            if !expired { self.connection = connection }
            return expired
        }
        if late { throw CancellationError() }
    }

    /// The operation is done with the connection (it goes back to the pool).
    func release() {
        lock.withLock { connection = nil }
    }

    /// The deadline passed: closes the connection the operation holds, if any, failing its query.
    func expire() {
        let held = lock.withLock {
            expired = true
            return connection
        }
        if let held {
            let closing: EventLoopFuture<Void> = held.close()  // the channel closes at once; its queries fail
            _ = closing
        }
    }
}

/// Who answers a deadline-bound operation first: the operation, its deadline, or the caller's cancellation. The first
/// answer resumes the caller; the others are dropped, and the timer and the operation's task are cancelled.
// @unchecked: every access to `state` is under `lock`.
final class DeadlineRace<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<T, any Error>?
    private var answer: Result<T, any Error>?
    private var tasks: [Task<Void, Never>] = []

    /// Called once, with the continuation and the tasks racing for it; an answer that came first resumes it at once.
    func start(_ continuation: CheckedContinuation<T, any Error>, work: Task<Void, Never>, timer: Task<Void, Never>) {
        let early: Result<T, any Error>? = lock.withLock {
            tasks = [work, timer]
            if let answer { return answer }
            self.continuation = continuation
            return nil
        }
        if let early {
            timer.cancel()
            work.cancel()
            continuation.resume(with: early)
        }
    }

    /// The first answer wins (true); later ones are ignored (false).
    @discardableResult
    func finish(_ result: Result<T, any Error>) -> Bool {
        let (won, waiting, tasks): (Bool, CheckedContinuation<T, any Error>?, [Task<Void, Never>]) = lock.withLock {
            guard answer == nil else { return (false, nil, []) }
            answer = result
            defer { continuation = nil }
            return (true, continuation, self.tasks)
        }
        guard won else { return false }
        for task in tasks { task.cancel() }  // the timer stops; an operation still waiting for a connection gives up
        waiting?.resume(with: result)
        return true
    }
}

extension PostgresConnection {
    /// All rows of a query, each ready to be read by column position.
    ///
    /// Rows are taken as they arrive, on the connection's event loop (PostgresNIO's `onRow`), not pulled one by one
    /// through its `AsyncSequence`: every query here reads all its rows anyway, and each pull cost an async hop and the
    /// sequence's back-pressure bookkeeping (docs/BENCHMARKS.md).
    func rows(_ query: PostgresQuery, _ logger: Logger) async throws -> [PostgresRandomAccessRow] {
        let rows = NIOLockedValueBox<[PostgresRandomAccessRow]>([])
        _ = try await self.query(query, logger: logger) { row in
            let row = row.makeRandomAccess()
            rows.withLockedValue { $0.append(row) }
        }.get()
        return rows.withLockedValue { $0 }
    }

    /// The changes a query of `PendingChange.columns` selects, given to `sink` as each row arrives (on the connection's
    /// event loop, like `rows`): each text column is read from the row's bytes (`PendingChangeCells`), not decoded into a
    /// `String` — making and freeing those was a quarter of a changes page's instructions.
    func changes<Sink: PendingChangeSink>(_ query: PostgresQuery, into sink: Sink, _ logger: Logger) async throws -> Sink {
        let state = NIOLockedValueBox((sink: sink, scratch: [UInt8]()))
        _ = try await self.query(query, logger: logger) { row in
            try state.withLockedValue { state in
                // The rows after a full sink still arrive (the query has its LIMIT); they are not read.
                guard !state.sink.isFull else { return }
                try PendingChangeCells.reading(row, scratch: &state.scratch) { state.sink.take($0) }
            }
        }.get()
        return state.withLockedValue { $0.sink }
    }

    /// Runs a statement; with `RETURNING 1` the result is the number of rows it touched.
    @discardableResult
    func run(_ query: PostgresQuery, _ logger: Logger) async throws -> Int {
        let count = NIOLockedValueBox(0)
        _ = try await self.query(query, logger: logger) { _ in count.withLockedValue { $0 += 1 } }.get()
        return count.withLockedValue { $0 }
    }
}

/// Rows are read by column position through `PostgresRandomAccessRow`, made once per row: `PostgresRow` has no cheap
/// access by position (each `PostgresRandomAccessRow(row)` copies all the row's cells), so reading a row column by
/// column through it cost work quadratic in its columns — a quarter of the API's instructions per changes page.
/// A column past the row's end is a damaged row (an error), not PostgresNIO's out-of-range trap, which ends the process.
extension PostgresRandomAccessRow: StoredRow {
    package func text(_ column: Int) throws -> String { try cell(column).decode(String.self) }
    package func optionalText(_ column: Int) throws -> String? { try cell(column).decode(String?.self) }
    package func int64(_ column: Int) throws -> Int64 { try cell(column).decode(Int64.self) }
    func int(_ column: Int) throws -> Int { try cell(column).decode(Int.self) }
    package func bool(_ column: Int) throws -> Bool { try cell(column).decode(Bool.self) }

    private func cell(_ column: Int) throws -> PostgresCell {
        guard column >= 0, column < count else { throw UnknownStoredValue.unexpected("row", "\(count) columns, no column \(column)") }
        return self[column]
    }
}

extension PendingChangeCells {
    /// Calls `body` with a row of `PendingChange.columns`. A row's cells are slices of one buffer that cannot be lent
    /// all at once, so their bytes are copied one after another into `scratch` (kept from row to row: no allocation
    /// once it is large enough), and the cells point there.
    static func reading(_ row: PostgresRow, scratch: inout [UInt8], _ body: (PendingChangeCells) -> Void) throws {
        let columns = 10
        scratch.removeAll(keepingCapacity: true)
        var id: Int64 = 0
        // By position, through `PostgresRandomAccessRow`'s `data` subscript: it hands over the cell's bytes without a
        // `PostgresCell` (whose column name is a `String` retained and released per cell). Iterating the row's cells
        // cost twice as much.
        let row = row.makeRandomAccess()
        guard row.count == columns else { throw UnknownStoredValue.unexpected("pending change row", "\(row.count) columns") }
        try withUnsafeTemporaryAllocation(of: Range<Int>?.self, capacity: columns) { spans in
            id = try row[0].decode(Int64.self)
            spans[0] = nil
            for column in 1..<columns {
                if let bytes = row[data: column].value {
                    let start = scratch.count
                    bytes.withUnsafeReadableBytes { scratch.append(contentsOf: $0) }
                    spans[column] = start..<scratch.count
                } else {
                    spans[column] = nil
                }
            }
            try scratch.withUnsafeBufferPointer { base in
                body(try PendingChangeCells(id: id) { column in spans[column].map { UTF8Cell(UnsafeBufferPointer(rebasing: base[$0])) } })
            }
        }
    }
}

extension PostgresStore: OperatorStore {}

/// A PostgreSQL failure as operators need it in logs: `PSQLError`'s own description is deliberately generic. Only the
/// SQLSTATE, the server's message and the client's error code are kept: never the query, its values, or the server's
/// `detail` (which can quote a row).
public struct PostgresStoreError: StoreClassifiedError, CustomStringConvertible, Sendable {
    public var sqlState: String?
    public var description: String
    /// How the error this one wraps was classified where it arose (a damaged row read inside the transaction).
    var wrapped: StoreFailure? = nil

    init(timeoutAfter timeout: Duration) {
        sqlState = nil
        description = "postgres: no answer within \(timeout)"
    }

    init(_ error: any Error) {
        if let already = error as? PostgresStoreError {
            self = already
        } else if let psql = error as? PSQLError {
            sqlState = psql.serverInfo?[.sqlState]
            if let sqlState, let message = psql.serverInfo?[.message] {
                description = "postgres \(sqlState): \(message)"
            } else {
                description = "postgres \(psql.code)"
            }
        } else {
            sqlState = nil
            description = "\(error)"
            wrapped = (error as? any StoreClassifiedError)?.storeFailure
        }
    }
}

extension PostgresStoreError {
    /// By the SQLSTATE's class: 22 (data exception, e.g. 22021 for a NUL in text), 23 (integrity constraint), 27
    /// (triggered data change), 54 (program limit, e.g. an index row too large) and P0 (raised by a trigger) are the
    /// values' fault; 42 (syntax or access rule) the statement's; no SQLSTATE (no answer, a lost connection, a timeout)
    /// or any other class an outage.
    public var storeFailure: StoreFailure { wrapped ?? Self.failure(sqlState: sqlState) }

    static func failure(sqlState: String?) -> StoreFailure {
        switch sqlState?.prefix(2) {
        case "22", "23", "27", "54", "P0": .data
        case "42": .statement
        default: .unavailable
        }
    }
}

/// A PostgresNIO error that reached a caller without passing `read`/`write` (which wrap it), classified alike.
extension PSQLError: StoreClassifiedError {
    public var storeFailure: StoreFailure { PostgresStoreError.failure(sqlState: serverInfo?[.sqlState]) }
}
