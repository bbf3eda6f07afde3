import Foundation
import Logging
import PostgresNIO
import RoundupCore
import RoundupStore

/// The store back end the tests run on: SQLite files by default, PostgreSQL when `ROUNDUP_TEST_STORE=postgres`
/// (then `ROUNDUP_TEST_POSTGRES_URL` names a server whose `postgres` database may create databases; `scripts/test`
/// starts one and runs the suites on both back ends).
public enum TestStore {
    public static var isPostgres: Bool { ProcessInfo.processInfo.environment["ROUNDUP_TEST_STORE"] == "postgres" }
    public static var name: String { isPostgres ? "postgres" : "sqlite" }

    /// `ROUNDUP_DATABASE_URL` for a new, empty store: a file in `directory`, or a new database on the test server.
    public static func makeURL(in directory: URL) async throws -> String {
        guard isPostgres else { return "sqlite:" + directory.appendingPathComponent("roundup.sqlite").path }
        guard let admin = ProcessInfo.processInfo.environment["ROUNDUP_TEST_POSTGRES_URL"], !admin.isEmpty else {
            throw StackError("ROUNDUP_TEST_STORE=postgres needs ROUNDUP_TEST_POSTGRES_URL (scripts/test sets both)")
        }
        let url = try PostgresURL(admin)
        let name = "t_" + UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: "")
        let connection = try await PostgresConnection.connect(
            configuration: .init(host: url.host, port: url.port, username: url.username, password: url.password, database: url.database, tls: .disable),
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
        return try await Stores.open(configuration: try RoundupConfiguration(environment: environment), logger: logger)
    }

    /// A new empty store of the back end under test, with its URL.
    public static func make(_ name: String = "store") async throws -> (store: any ServerStore, url: String) {
        let url = try await makeURL(in: try TestSupport.temporaryDirectory(name))
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
