import Foundation
import GRDB
import Logging
import NIOHTTP1
import RoundupCore
import RoundupJobs
import RoundupPostgres
import RoundupRedis
import RoundupRuntime
import RoundupSQLite
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

/// Cold starts and publishing order: every process started in one instant on a fresh store comes up, and a worker's
/// start-up publication never overwrites what the API published after it, nor brings back a deleted account.
extension HostileTrafficTests {
    static let coldStartBootstrap = "bootstrap-coldstart-0123456789"

    // MARK: Cold starts

    /// What "the schema, complete, once" means on either back end: every table and index with its definition and
    /// each migration applied (SQLite), or every table and each migration version (PostgreSQL).
    static func schema(_ url: String) async throws -> [String] {
        if url.hasPrefix("sqlite:") {
            var configuration = GRDB.Configuration()
            configuration.readonly = true
            let queue = try DatabaseQueue(path: String(url.dropFirst("sqlite:".count)), configuration: configuration)
            return try await queue.read { db in
                try String.fetchAll(
                    db,
                    sql:
                        "SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
                )
                    + String.fetchAll(db, sql: "SELECT 'migration ' || identifier FROM grdb_migrations ORDER BY identifier")
            }
        }
        let opened = try await TestStore.open(url: url)
        let store = try #require(opened as? PostgresStore)
        let schema = try await store.tableNames().map { "table " + $0 } + store.appliedMigrations().map { "migration " + $0 }
        await TestStore.close(opened)
        return schema
    }

    @Test(arguments: StoreBackend.available) func everyProcessStartedAtOnceOnAFreshStoreComesUp(backend: StoreBackend) async throws {
        // The schema of a store migrated by one process alone.
        let reference = try await Self.schema(
            try await TestStore.makeURL(backend, in: try TestSupport.temporaryDirectory("coldstart-reference")).withOpened())
        #expect(reference.contains("migration v1-reference-schema"))
        for round in 1...3 {
            let stack = try await Stack(store: backend)
            var started: [(process: ManagedProcess, healthz: Int)] = []
            var migrations: [ManagedProcess] = []
            func environment(_ extra: [String: String]) -> [String: String] { stack.environment.merging(extra) { _, new in new } }
            func spawn(_ executable: String, _ name: String, arguments: [String] = [], _ extra: [String: String]) throws -> ManagedProcess {
                try ManagedProcess(
                    name: "\(name)-r\(round)", executable: TestSupport.binDirectory.appendingPathComponent(executable), arguments: arguments,
                    environment: environment(extra), logDirectory: stack.directory)
            }
            // In one instant: the ingress, two workers, two APIs and two `roundupctl migrate`, on a store nobody migrated.
            let ports = try (0..<4).map { _ in try TestSupport.freePort() }
            started.append((try spawn("roundup-ingress", "ingress", ["ROUNDUP_INGRESS_PORT": "\(stack.ingressPort)"]), stack.ingressPort))
            for (i, port) in ports[0..<2].enumerated() {
                started.append(
                    (try spawn("roundup-worker", "worker\(i)", ["ROUNDUP_WORKER_PORT": "\(port)", "ROUNDUP_WORKER_NAME": "cold\(i)"]), port))
            }
            for (i, port) in ports[2..<4].enumerated() {
                started.append(
                    (try spawn("roundup-api", "api\(i)", ["ROUNDUP_API_PORT": "\(port)", "ROUNDUP_BOOTSTRAP_TOKEN": Self.coldStartBootstrap]), port))
            }
            for i in 0..<2 { migrations.append(try spawn("roundupctl", "migrate\(i)", arguments: ["migrate"], [:])) }

            for process in migrations {
                let code = await process.wait(timeout: .seconds(30))
                #expect(code == 0, "round \(round) [\(backend)]: \(process.name) exited \(code.map(String.init) ?? "not at all"): \(process.output)")
                #expect(process.output.contains("store is at the latest schema"))
            }
            for (process, port) in started {
                let healthy = await TestSupport.eventually(timeout: .seconds(20)) {
                    (try? await stack.get(port: port, "/healthz").status) == .ok
                }
                #expect(healthy, "round \(round) [\(backend)]: \(process.name) did not come up: \(process.output)")
            }
            // Up, and still up a moment later (a process that lost a migration race exits after its first answers).
            try await Task.sleep(for: .milliseconds(300))
            for (process, port) in started {
                #expect(process.isRunning, "round \(round) [\(backend)]: \(process.name) exited: \(process.output)")
                #expect((try? await stack.get(port: port, "/healthz").status) == .ok)
            }
            #expect(try await Self.schema(stack.databaseURL) == reference, "round \(round) [\(backend)]")
            // Opened as every process opens it: WAL, and FULL on the writer (GRDB's WAL set-up would leave NORMAL).
            if let sqlite = try await stack.store() as? SQLiteStore {
                #expect(try await sqlite.journalMode() == "wal")
                #expect(try await sqlite.writerSynchronous() == 2)
            }
            // The API works on it: an account is created and read back.
            let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: Self.coldStartBootstrap, port: ports[2])
            #expect(created.status == .created, "\(created.body)")
            for (process, _) in started { await process.stop() }
            await stack.shutdown()
        }
    }

    // MARK: Publishing order

    /// An account made through the API, with credentials, and a list L1 on board B1 in the store.
    func publishingAccount(_ stack: Stack, secret: String) async throws -> (account: String, token: String) {
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: Self.coldStartBootstrap)
        let account = try #require(created.json["account_id"]?.stringValue, "\(created.body)")
        let token = try #require(created.json["auth_token"]?.stringValue)
        let put = try await stack.callAPI(
            .PUT, "/dailyroundup/account", token: token,
            body: #"{"trello_api_key":"test-api-key","trello_token":"test-token","trello_webhook_secret":"\#(secret)"}"#)
        #expect(put.status == .ok, "\(put.body)")
        _ = try await stack.store().createSyncList(accountID: account, name: "Groceries", trelloBoardID: "B1", trelloListID: "L1")
        return (account, token)
    }

    func publishedSecret(_ stack: Stack, _ account: String) async throws -> String? {
        try await stack.redis.send("HGET", RedisArgument(stack.keys.webhookSecrets), RedisArgument(account)).string
    }

    /// Which of these models route to the account, in the order given.
    func routes(_ stack: Stack, _ account: String, _ models: [String]) async throws -> [String] {
        var routed: [String] = []
        for model in models
        where try await stack.redis.send("SISMEMBER", RedisArgument(stack.keys.modelRoute(model)), RedisArgument(account)) == .integer(1) {
            routed.append(model)
        }
        return routed
    }

    @Test(arguments: StoreBackend.available) func aWorkerStartingWhileTheAPIChangesASecretLeavesTheNewestSecret(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        try await stack.startAPI(bootstrapToken: Self.coldStartBootstrap)
        let (account, token) = try await publishingAccount(stack, secret: "secret-old-0123456789")
        let store = try await stack.store()

        // A worker starts: it reads the store (the old secret)…
        let worker = try await RoutePublisher.readAll(store: store, redis: stack.redis, keys: stack.keys)
        // …the API changes the secret and publishes it…
        let put = try await stack.callAPI(.PUT, "/dailyroundup/account", token: token, body: #"{"trello_webhook_secret":"secret-new-0123456789"}"#)
        #expect(put.status == .ok, "\(put.body)")
        #expect(try await publishedSecret(stack, account) == "secret-new-0123456789")
        // …then the worker writes what it read: the newer secret stays, the rest of what it read is published.
        let outcome = try await worker.write(redis: stack.redis, keys: stack.keys)
        #expect(try await publishedSecret(stack, account) == "secret-new-0123456789")
        #expect(outcome.skipped >= 1)
        #expect(try await routes(stack, account, ["L1", "B1"]) == ["L1", "B1"])
        #expect(try await stack.redis.send("HGET", RedisArgument(stack.keys.webhookTokens), RedisArgument(account)).string != nil)

        // The other order (the worker reads after the API's change) publishes the new secret too.
        try await RoutePublisher.publishAll(store: store, redis: stack.redis, keys: stack.keys, logger: .init(label: "test"))
        #expect(try await publishedSecret(stack, account) == "secret-new-0123456789")
        // A lost version counter (deleted by hand) does not freeze what is published: the next change still lands.
        _ = try await stack.redis.send("DEL", RedisArgument(stack.keys.routingEpoch))
        let again = try await stack.callAPI(
            .PUT, "/dailyroundup/account", token: token, body: #"{"trello_webhook_secret":"secret-newest-0123456789"}"#)
        #expect(again.status == .ok, "\(again.body)")
        #expect(try await publishedSecret(stack, account) == "secret-newest-0123456789")
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func aWorkerStartingWhileTheAPIDeletesAnAccountOrAListRestoresNothing(backend: StoreBackend) async throws
    {
        let stack = try await Stack(store: backend)
        try await stack.startAPI(bootstrapToken: Self.coldStartBootstrap)
        let store = try await stack.store()
        let (gone, goneToken) = try await publishingAccount(stack, secret: "secret-gone-0123456789")
        // A second account with two lists on board B2; one of them is deleted.
        let (kept, keptToken) = try await publishingAccount(stack, secret: "secret-kept-0123456789")
        let l2 = try await store.createSyncList(accountID: kept, name: "Errands", trelloBoardID: "B2", trelloListID: "L2")
        _ = try await store.createSyncList(accountID: kept, name: "Chores", trelloBoardID: "B2", trelloListID: "L3")
        try await RoutePublisher.publishAll(store: store, redis: stack.redis, keys: stack.keys, logger: .init(label: "test"))
        #expect(try await publishedSecret(stack, gone) != nil)
        #expect(try await routes(stack, gone, ["L1"]) == ["L1"])
        #expect(try await routes(stack, kept, ["L2"]) == ["L2"])

        // A worker starts and reads the store…
        let worker = try await RoutePublisher.readAll(store: store, redis: stack.redis, keys: stack.keys)
        // …the API deletes one account, and a list of the other…
        #expect(try await stack.callAPI(.DELETE, "/dailyroundup/account", token: goneToken).status == .noContent)
        #expect(try await stack.callAPI(.DELETE, "/dailyroundup/lists/\(l2.id)", token: keptToken).status == .noContent)
        #expect(try await publishedSecret(stack, gone) == nil)
        // …then the worker writes what it read before: nothing of the deleted comes back.
        try await worker.write(redis: stack.redis, keys: stack.keys)
        #expect(try await publishedSecret(stack, gone) == nil)
        #expect(try await stack.redis.send("HGET", RedisArgument(stack.keys.webhookTokens), RedisArgument(gone)).isNull)
        #expect(try await routes(stack, gone, ["L1", "B1"]).isEmpty)
        #expect(try await routes(stack, kept, ["L2"]).isEmpty)
        // What still exists is still published: the other account, its other list, and their board.
        #expect(try await publishedSecret(stack, kept) == "secret-kept-0123456789")
        #expect(try await routes(stack, kept, ["L1", "B1", "L2", "L3", "B2"]) == ["L1", "B1", "L3", "B2"])
        // A request that read the deleted account before its deletion cannot publish it either.
        try await RoutePublisher.publishToken(account: gone, token: "late-token", redis: stack.redis, keys: stack.keys)
        #expect(try await stack.redis.send("HGET", RedisArgument(stack.keys.webhookTokens), RedisArgument(gone)).isNull)
        await stack.shutdown()
    }
}

extension String {
    /// Opens (and so migrates) the store at this URL in this process, alone, and returns the URL.
    fileprivate func withOpened() async throws -> String {
        let store = try await TestStore.open(url: self)
        await TestStore.close(store)
        return self
    }
}
