import ArgumentParser
import Foundation
import Logging
import NIOCore
import RoundupCore
import RoundupOps
import RoundupPush
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupSync

/// The operators' command line. Reads the same environment as the servers.
/// Exit codes: 0 ok, 1 a check failed, 2 usage error.
@main
struct RoundupCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "roundupctl",
        abstract: "Look at and mend a roundup-server deployment: queues, dead letters, accounts, routes.",
        subcommands: [Queues.self, DLQ.self, Jobs.self, Accounts.self, Lists.self, Reconcile.self, Routes.self, Migrate.self, Check.self])

    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            let code = exitCode(for: error)
            if code == .validationFailure || code.rawValue == 64 {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
    }
}

/// What every command needs: the configuration, a logger that stays quiet, Redis.
struct Context {
    let configuration: RoundupConfiguration
    let redis: RedisClient

    static func make() throws -> Context {
        let configuration: RoundupConfiguration
        do {
            configuration = try RoundupConfiguration()
        } catch {
            throw CleanExit.message("\(error)")
        }
        var logger = Logger(label: "roundupctl")
        logger.logLevel = .error
        return Context(configuration: configuration, redis: try RedisClient.make(configuration: configuration, logger: logger))
    }
}

/// JSON escapes C0; DEL and C1 are escaped too, so what a client stored cannot drive the operator's terminal.
func printJSON(_ value: JSONValue) { print(TerminalText.jsonSafe(value.canonicalJSON)) }

/// Stored text (names, errors) as a terminal may show it: escape sequences and controls removed (`TerminalText`).
func shown(_ text: String) -> String { TerminalText.printable(text) }

struct Queues: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Length, lag, pending, oldest pending age, consumers and dead letters of the webhook, job and push streams.")

    @Flag(help: "One JSON object, for tools.") var json = false
    @Option(help: "Refresh every N seconds until interrupted.") var watch: Double?

    func run() async throws {
        let context = try Context.make()
        defer { Task { await context.redis.shutdown() } }
        repeat {
            let report = try await QueueInspector.webhookReport(redis: context.redis, keys: context.configuration.redisKeys)
            let jobs = try await QueueInspector.jobReport(redis: context.redis, keys: context.configuration.redisKeys)
            let pushes = try await QueueInspector.pushReport(redis: context.redis, keys: context.configuration.redisKeys)
            if json {
                printJSON(.object(["streams": .array([report.json, jobs.json, pushes.json])]))
            } else {
                if watch != nil { print("\u{1B}[2J\u{1B}[H" + Date().formatted(.iso8601)) }
                print(QueueInspector.table(report))
                print("")
                print(QueueInspector.table(jobs))
                print("")
                print(QueueInspector.table(pushes))
            }
            if let watch { try await Task.sleep(for: .milliseconds(Int(watch * 1000))) }
        } while watch != nil
    }
}

struct DLQ: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dlq", abstract: "Dead letters: events that failed too often, with their last error.",
        subcommands: [List.self, Show.self, Replay.self, Purge.self])

    struct List: AsyncParsableCommand {
        @Option(help: "At most this many.") var limit = 50
        @Flag var json = false
        func run() async throws {
            let context = try Context.make()
            let letters = try await DeadLetterQueue(redis: context.redis, keys: context.configuration.redisKeys).list(limit: limit)
            if json {
                printJSON(.array(letters.map(\.summary)))
            } else if letters.isEmpty {
                print("no dead letters")
            } else {
                for letter in letters {
                    print(
                        "\(shown(letter.id))  \(shown(letter.type ?? "?"))  account \(shown(letter.account ?? "?"))  deliveries \(shown(letter.letter.deliveries.map(String.init) ?? "?"))  \(shown(letter.letter.error ?? ""))"
                    )
                }
            }
            await context.redis.shutdown()
        }
    }

    struct Show: AsyncParsableCommand {
        @Argument(help: "The dead letter's id.") var id: String
        func run() async throws {
            let context = try Context.make()
            guard let letter = try await DeadLetterQueue(redis: context.redis, keys: context.configuration.redisKeys).show(id: id) else {
                await context.redis.shutdown()
                throw ValidationError("no dead letter \(id)")
            }
            var object = letter.summary.objectValue ?? [:]
            object["body"] = letter.body.map { (try? JSONParser.parse(Array($0.utf8))) ?? .string($0) } ?? .null
            printJSON(.object(object))
            await context.redis.shutdown()
        }
    }

    struct Replay: AsyncParsableCommand {
        @Argument(help: "Ids to replay; none means all.") var ids: [String] = []
        @Flag(help: "Do not ask.") var yes = false
        func run() async throws {
            let context = try Context.make()
            let queue = DeadLetterQueue(redis: context.redis, keys: context.configuration.redisKeys)
            let total = ids.isEmpty ? try await queue.count() : ids.count
            if !yes {
                print("Replay \(total) dead letter(s) into \(context.configuration.redisKeys.webhookStream)? [y/N] ", terminator: "")
                guard readLine()?.lowercased().hasPrefix("y") == true else {
                    print("nothing replayed")
                    await context.redis.shutdown()
                    return
                }
            }
            let replayed = try await queue.replay(ids: ids.isEmpty ? nil : ids) { done in
                if total > 100 { FileHandle.standardError.write(Data("replayed \(done)/\(total)\n".utf8)) }
            }
            print("replayed \(replayed)")
            await context.redis.shutdown()
        }
    }

    struct Purge: AsyncParsableCommand {
        @Flag(help: "Required: purging cannot be undone.") var yes = false
        func validate() throws {
            guard yes else { throw ValidationError("purge deletes every dead letter for good; add --yes") }
        }
        func run() async throws {
            let context = try Context.make()
            let purged = try await DeadLetterQueue(redis: context.redis, keys: context.configuration.redisKeys).purge()
            print("purged \(purged)")
            await context.redis.shutdown()
        }
    }
}

struct Jobs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Background jobs: status, progress, heartbeat age, stale or not.", subcommands: [List.self, Show.self])

    static func json(_ job: JobRecord, now: Date, staleAfter: TimeInterval) -> JSONValue {
        let age = Timestamp.date(job.updatedAt).map { now.timeIntervalSince($0) }
        return .object([
            "job_id": .string(job.id), "account_id": .string(job.accountID), "kind": .string(job.kind.rawValue),
            "status": .string(job.status.rawValue),
            "processed": .number(Double(job.processed)), "total": .number(Double(job.total)), "error": job.error.map(JSONValue.string) ?? .null,
            "heartbeat_age_s": age.map { .number(($0 * 10).rounded() / 10) } ?? .null, "stale": .bool(job.isStale(now: now, after: staleAfter)),
            "created_at": .string(job.createdAt), "updated_at": .string(job.updatedAt),
        ])
    }

    struct List: AsyncParsableCommand {
        @Option(help: "At most this many, newest first.") var limit = 50
        @Flag var json = false
        func run() async throws {
            let context = try Context.make()
            try await Stores.withStore(configuration: context.configuration) { store in
                let jobs = try await store.jobs(limit: limit, id: nil)
                let now = Date()
                let staleAfter = TimeInterval(context.configuration.jobStaleSeconds)
                if json {
                    printJSON(.array(jobs.map { Jobs.json($0, now: now, staleAfter: staleAfter) }))
                } else if jobs.isEmpty {
                    print("no jobs")
                } else {
                    for job in jobs {
                        let age = Timestamp.date(job.updatedAt).map { String(format: "%.0f s", now.timeIntervalSince($0)) } ?? "?"
                        print(
                            "\(job.id)  \(job.kind.rawValue)  \(job.status.rawValue)\(job.isStale(now: now, after: staleAfter) ? " (STALE)" : "")  \(job.processed)/\(job.total)  heartbeat \(age) ago  account \(job.accountID)"
                        )
                    }
                }
                await context.redis.shutdown()
            }
        }
    }

    struct Show: AsyncParsableCommand {
        @Argument var id: String
        func run() async throws {
            let context = try Context.make()
            try await Stores.withStore(configuration: context.configuration) { store in
                await context.redis.shutdown()
                guard let job = try await store.jobs(limit: 1, id: id).first else { throw ValidationError("no job \(id)") }
                printJSON(Jobs.json(job, now: Date(), staleAfter: TimeInterval(context.configuration.jobStaleSeconds)))
            }
        }
    }
}

struct Accounts: AsyncParsableCommand {
    static let configuration = CommandConfiguration(subcommands: [List.self])
    struct List: AsyncParsableCommand {
        @Flag var json = false
        func run() async throws {
            let context = try Context.make()
            try await Stores.withStore(configuration: context.configuration) { store in
                let accounts = try await store.allAccounts()
                let rows: [JSONValue] = accounts.map { a in
                    .object([
                        "account_id": .string(a.details.id), "trello_api_key": maskSecret(a.details.trelloAPIKey).map(JSONValue.string) ?? .null,
                        "trello_token": maskSecret(a.details.trelloToken).map(JSONValue.string) ?? .null,
                        "trello_webhook_secret": maskSecret(a.details.trelloWebhookSecret).map(JSONValue.string) ?? .null,
                        "lists": .number(Double(a.lists)), "pending_changes": .number(Double(a.pendingChanges)),
                        "created_at": .string(a.details.createdAt),
                    ])
                }
                if json {
                    printJSON(.array(rows))
                } else {
                    for a in accounts {
                        print(
                            "\(a.details.id)  lists \(a.lists)  pending \(a.pendingChanges)  key \(maskSecret(a.details.trelloAPIKey) ?? "-")  token \(maskSecret(a.details.trelloToken) ?? "-")  created \(a.details.createdAt)"
                        )
                    }
                }
                await context.redis.shutdown()
            }
        }
    }
}

struct Routes: AsyncParsableCommand {
    static let configuration = CommandConfiguration(subcommands: [Sync.self])
    struct Sync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Republish every account secret and model route from the store to Redis.")
        func run() async throws {
            let context = try Context.make()
            try await Stores.withStore(configuration: context.configuration) { store in
                var logger = Logger(label: "roundupctl")
                logger.logLevel = .error
                try await RoutePublisher.publishAll(store: store, redis: context.redis, keys: context.configuration.redisKeys, logger: logger)
                let snapshot = try await store.routingSnapshot()
                print("published \(snapshot.secrets.count) secrets and \(snapshot.routes.count) routes")
                await context.redis.shutdown()
            }
        }
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply the store's migrations.")
    func run() async throws {
        let context = try Context.make()
        try await Stores.withStore(configuration: context.configuration) { _ in }
        print("store is at the latest schema")
        await context.redis.shutdown()
    }
}

struct Check: AsyncParsableCommand {
    /// APNs credentials as roundup-pusher needs them (only checked when any of them is set).
    static func apnsProblems(_ c: RoundupConfiguration) -> [String] {
        let given = [c.apnsKeyFile, c.apnsKeyID, c.apnsTeamID, c.apnsTopic].compactMap { $0 }
        guard !given.isEmpty else { return [] }
        var problems = c.missingAPNsKeys.map { "\($0) is not set (roundup-pusher needs it)" }
        if let file = c.apnsKeyFile {
            do {
                _ = try APNsTokenProvider(keyFile: file, keyID: c.apnsKeyID ?? "", teamID: c.apnsTeamID ?? "")
            } catch {
                problems.append("ROUNDUP_APNS_KEY_FILE \(file) is not a P-256 .p8 key: \(error)")
            }
        }
        for (name, value) in [("ROUNDUP_APNS_KEY_ID", c.apnsKeyID), ("ROUNDUP_APNS_TEAM_ID", c.apnsTeamID)] {
            if let value, !(value.count == 10 && value.allSatisfy { $0.isLetter || $0.isNumber }) {
                problems.append("\(name) should be Apple's 10-character identifier")
            }
        }
        return problems
    }

    static let configuration = CommandConfiguration(
        abstract: "Reach Redis and the store; check stored credentials look right. Exits 1 when anything is wrong.")
    func run() async throws {
        let context = try Context.make()
        var problems: [String] = []
        do {
            _ = try await context.redis.send(RedisCommand("PING"), timeout: .seconds(2))
            print("ok    redis \(try RedisConfiguration(url: context.configuration.redisURL).endpoint)")
        } catch {
            problems.append("redis: \(error)")
        }
        do {
            problems += try await Stores.withStore(configuration: context.configuration) { store in
                var problems: [String] = []
                try await store.ping()
                print("ok    store \(context.configuration.postgresURL?.masked ?? context.configuration.databaseURL)")
                for account in try await store.allAccounts() {
                    let d = account.details
                    if let key = d.trelloAPIKey, !(key.count == 32 && key.allSatisfy(\.isHexDigit)) {
                        problems.append("account \(d.id): trello_api_key is not 32 hex characters")
                    }
                    if account.lists > 0, d.trelloToken == nil || d.trelloWebhookSecret == nil {
                        problems.append("account \(d.id): syncs lists but lacks trello_token or trello_webhook_secret")
                    }
                }
                return problems
            }
        } catch {
            problems.append("store: \(error)")
        }
        if context.configuration.publicURL == nil { problems.append("ROUNDUP_PUBLIC_URL is not set (the ingress and the API need it)") }
        problems += Self.apnsProblems(context.configuration)
        if context.configuration.missingAPNsKeys.isEmpty, Self.apnsProblems(context.configuration).isEmpty {
            print(
                "ok    apns key \(context.configuration.apnsKeyID ?? "") (team \(context.configuration.apnsTeamID ?? ""), topic \(context.configuration.apnsTopic ?? ""))"
            )
        }
        await context.redis.shutdown()
        for problem in problems { print("FAIL  \(problem)") }
        if !problems.isEmpty { throw ExitCode(1) }
    }
}

struct Lists: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Every synced list with its last successful reconciliation with Trello.")
    @Flag var json = false
    func run() async throws {
        let context = try Context.make()
        await context.redis.shutdown()
        try await Stores.withStore(configuration: context.configuration) { store in
            let lists = try await store.allSyncLists()
            if json {
                printJSON(
                    .array(
                        lists.map { item in
                            .object([
                                "sync_list_id": .string(item.list.id), "account_id": .string(item.list.accountID), "name": .string(item.list.name),
                                "trello_list_id": .string(item.list.trelloListID),
                                "last_reconciled_at": item.list.lastReconciledAt.map(JSONValue.string) ?? .null,
                                "last_reconcile_error": item.list.lastReconcileError.map(JSONValue.string) ?? .null,
                                "account_needs_attention": .bool(item.needsAttention),
                            ])
                        }))
                return
            }
            if lists.isEmpty { print("no lists") }
            for (list, flagged) in lists {
                let last = list.lastReconciledAt.flatMap(Timestamp.date).map { String(format: "%.0f s ago", Date().timeIntervalSince($0)) } ?? "never"
                print(
                    "\(list.id)  \(shown(list.name))  trello \(shown(list.trelloListID))  reconciled \(last)\(list.lastReconcileError.map { "  (last error: \(shown($0)))" } ?? "")\(flagged ? "  ACCOUNT NEEDS ATTENTION" : "")"
                )
            }
        }
    }
}

struct Reconcile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Queue a reconciliation with Trello of one list, or of every list; a worker runs it.")
    @Option(help: "The sync_list_id; every list when omitted.") var list: String?
    func run() async throws {
        let context = try Context.make()
        defer { Task { await context.redis.shutdown() } }
        try await Stores.withStore(configuration: context.configuration) { store in
            let lists = try await store.allSyncLists().map(\.list).filter { list == nil || $0.id == list }
            guard !lists.isEmpty else { throw ValidationError(list.map { "no list \($0)" } ?? "no lists") }
            for item in lists {
                guard
                    case .created(let job) = try await store.submitJob(
                        accountID: item.accountID, kind: .reconcile, deviceID: nil, idempotencyKey: nil,
                        payload: .object(["sync_list_id": .string(item.id)]),
                        total: 1, staleAfter: TimeInterval(context.configuration.jobStaleSeconds))
                else { continue }
                _ = try await context.redis.send(
                    .streamAppend(
                        context.configuration.redisKeys.jobStream,
                        fields: SyncJobMessage(jobID: job.id, account: item.accountID, kind: .reconcile).fields))
                print("queued \(job.id) for list \(item.id) (\(shown(item.name))); roundupctl jobs show \(job.id)")
            }
        }
    }
}
