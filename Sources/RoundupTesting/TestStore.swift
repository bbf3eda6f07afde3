public import Foundation
public import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import RoundupCore
import RoundupDatabase
public import RoundupRuntime
public import RoundupStore
import ServiceLifecycle

/// A store back end a test runs on: `@Test(arguments: StoreBackend.available) func name(backend: StoreBackend)`, and
/// the test passes `backend` to `Stack(store:)`, `TestStore.make` or `InProcessAPI.run`. Swift Testing prints the
/// argument, so a failure names the store.
public enum StoreBackend: String, Sendable, CaseIterable, CustomStringConvertible {
    case sqlite
    case postgres

    /// SQLite always; PostgreSQL when `ROUNDUP_TEST_POSTGRES_URL` names a server whose `postgres` database may create
    /// databases (`scripts/test` starts one and sets it). Without it every store test still runs on SQLite.
    public static var available: [StoreBackend] {
        guard let url = ProcessInfo.processInfo.environment["ROUNDUP_TEST_POSTGRES_URL"], !url.isEmpty else { return [.sqlite] }
        return [.sqlite, .postgres]
    }

    public var description: String { rawValue }
}

/// New, empty, migrated stores of a back end, as the processes open them.
public enum TestStore {
    /// `ROUNDUP_DATABASE_URL` for a new, empty store: a file in `directory`, or a new database on the test server.
    public static func makeURL(_ backend: StoreBackend, in directory: URL) async throws -> String {
        guard backend == .postgres else { return "sqlite:" + directory.appendingPathComponent("roundup.sqlite").path }
        guard let admin = ProcessInfo.processInfo.environment["ROUNDUP_TEST_POSTGRES_URL"], !admin.isEmpty else {
            throw StackError("the postgres back end needs ROUNDUP_TEST_POSTGRES_URL (scripts/test sets it)")
        }
        let url = try PostgresURL(admin)
        let name = "t_" + UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: "")
        let connection = try await PostgresConnection.connect(
            configuration: .init(
                host: url.host, port: url.port, username: url.username, password: url.password, database: url.database, tls: .disable),
            id: 1, logger: Logger(label: "roundup.test.postgres"))
        do {
            _ = try await connection.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: Logger(label: "roundup.test.postgres"))
        } catch {
            try? await connection.close()
            throw error
        }
        try await connection.close()
        return "postgres://\(url.username)@\(url.host):\(url.port)/\(name)?sslmode=disable"
    }

    /// Opens and migrates the store at `url`, as the processes do.
    public static func open(url: String) async throws -> any ServerStore {
        var environment = ProcessInfo.processInfo.environment
        environment["ROUNDUP_DATABASE_URL"] = url
        environment["ROUNDUP_DATABASE_POOL_SIZE"] = "4"
        var logger = Logger(label: "roundup.test.store")
        logger.logLevel = .error  // the pool's reconnection attempts during a restart test are expected
        return try await open(configuration: try RoundupConfiguration(environment: environment), logger: logger)
    }

    /// Makes and migrates the store as the processes do; its service (PostgreSQL's pool), which a process runs in its
    /// ServiceGroup, runs here in a task of the test's until `close(_:)`.
    public static func open(configuration: RoundupConfiguration, logger: Logger) async throws -> any ServerStore {
        let store = try await Stores.make(configuration: configuration, logger: logger)
        if let service = store.service {
            running.withLockedValue { $0[ObjectIdentifier(store as AnyObject)] = Task { try? await service.run() } }
        }
        do {
            try await store.migrate()
        } catch {
            await close(store)
            throw error
        }
        return store
    }

    /// Stops the store's service (closes PostgreSQL's connections); nothing for SQLite.
    public static func close(_ store: any ServerStore) async {
        guard let task = running.withLockedValue({ $0.removeValue(forKey: ObjectIdentifier(store as AnyObject)) }) else { return }
        task.cancel()
        await task.value
    }

    private static let running = NIOLockedValueBox<[ObjectIdentifier: Task<Void, Never>]>([:])

    /// A new empty store of `backend`, with its URL.
    public static func make(_ backend: StoreBackend, _ name: String = "store") async throws -> (store: any ServerStore, url: String) {
        let url = try await makeURL(backend, in: try TestSupport.temporaryDirectory(name))
        return (try await open(url: url), url)
    }

    /// Stops and starts the test server (`ROUNDUP_TEST_PG_CTL` is a script scripts/test writes).
    public static func postgresControl(_ action: String) async throws {
        guard let control = ProcessInfo.processInfo.environment["ROUNDUP_TEST_PG_CTL"], !control.isEmpty else {
            throw StackError("ROUNDUP_TEST_PG_CTL is not set (scripts/test sets it)")
        }
        let process = try ManagedProcess(
            name: "pgctl-\(action)", executable: URL(fileURLWithPath: control), arguments: [action],
            logDirectory: try TestSupport.temporaryDirectory("pgctl"))
        guard let status = await process.wait(timeout: .seconds(90)), status == 0 else {
            throw StackError("\(control) \(action) failed: \((try? String(contentsOf: process.logFile, encoding: .utf8)) ?? "")")
        }
    }
}
