public import Logging
import RoundupCore
import RoundupPostgres
public import RoundupRuntime
import RoundupSQLite
public import RoundupStore
import ServiceLifecycle

/// Opening the store `ROUNDUP_DATABASE_URL` names: a SQLite file, or a PostgreSQL server.
public enum Stores {
    /// The store, ready to be run: a SQLite file is opened and migrated here (under its start-up lock); a PostgreSQL
    /// store's connection pool is `store.service`, which the process's ServiceGroup runs (`RoundupServices.run`'s
    /// `dependencies`), and it is migrated in the group's start-up, once the pool runs.
    public static func make(configuration: RoundupConfiguration, logger: Logger = Logger(label: "roundup.store")) async throws -> any ServerStore {
        if let url = configuration.postgresURL {
            return try PostgresStore(
                url: url, poolSize: configuration.databasePoolSize, caFile: configuration.databaseCAFile,
                timeout: .seconds(configuration.databaseTimeoutSeconds), logger: logger)
        }
        guard let path = configuration.sqlitePath else {
            throw ConfigurationError(key: "ROUNDUP_DATABASE_URL", problem: "names neither a SQLite file nor a PostgreSQL server")
        }
        return try await SQLiteStore.open(path: path)
    }

    /// For commands that use the store for a moment (roundupctl): the store made, its service run beside `body` for
    /// as long as `body` runs, migrated first; the pool is closed before this returns.
    public static func withStore<T>(
        configuration: RoundupConfiguration, logger: Logger = Logger(label: "roundup.store"),
        _ body: (any ServerStore) async throws -> T
    ) async throws -> T {
        let store = try await make(configuration: configuration, logger: logger)
        guard let service = store.service else { return try await body(store) }
        return try await withThrowingTaskGroup(of: Void.self, returning: T.self) { group in
            group.addTask { try await service.run() }
            defer { group.cancelAll() }
            try await store.migrate()
            return try await body(store)
        }
    }
}
