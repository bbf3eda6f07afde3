public import ArgumentParser
import Foundation
import Logging
import NIOCore
import RoundupCore
import RoundupDashboard
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
        subcommands: [
            Queues.self, Pending.self, DLQ.self, Pause.self, Resume.self, Consumers.self, Jobs.self, Accounts.self, Lists.self, Reconcile.self,
            Routes.self, Migrate.self, Check.self, DashboardCommand.self,
        ])

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

/// Streams are named as `queues` shows them: `webhooks`, `jobs`, `push`.
extension RoundupStream: ExpressibleByArgument {}

/// A count with what it counts, for commands whose answer is one number.
func report(_ key: String, _ count: Int, json: Bool, text: String) {
    if json { printJSON(.object([key: .number(Double(count))])) } else { print(text) }
}

struct Queues: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Length, lag, pending, oldest pending age, consumers and dead letters of the webhook, job and push streams.")

    @Flag(help: "One JSON object, for tools.") var json = false
    @Option(help: "Refresh every N seconds until interrupted.") var watch: Double?

    func run() async throws {
        let context = try Context.make()
        defer { Task { await context.redis.shutdown() } }
        repeat {
            let reports = try await QueueInspector.reports(redis: context.redis, keys: context.configuration.redisKeys)
            if json {
                printJSON(.object(["streams": .array(reports.map(\.json))]))
            } else {
                if watch != nil { print("\u{1B}[2J\u{1B}[H" + Date().formatted(.iso8601)) }
                print(reports.map(QueueInspector.table).joined(separator: "\n\n"))
            }
            if let watch { try await Task.sleep(for: .milliseconds(Int(watch * 1000))) }
        } while watch != nil
    }
}

struct DLQ: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dlq",
        abstract: "Dead letters: webhook events that failed too often, and entries of any stream that do not decode, with their last error.",
        subcommands: [List.self, Show.self, Replay.self, Delete.self, Purge.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Dead letters, oldest first, a page at a time; the last line (or `next`) says how to go on.")
        @Option(help: "The stream whose dead letters: webhooks (the default), jobs or push.") var stream: RoundupStream = .webhooks
        @Option(help: "At most this many.") var limit = 50
        @Option(help: "Start after this id (the `next` of the previous page).") var after: String?
        @Option(help: "Only this account's.") var account: String?
        @Option(help: "Only this Trello action type (e.g. updateCard).") var type: String?
        @Option(help: "Only those whose error contains this text (any case).") var error: String?
        @Flag var json = false
        func validate() throws {
            guard (1...10_000).contains(limit) else { throw ValidationError("--limit must be 1 to 10000") }
        }
        func run() async throws {
            let context = try Context.make()
            let (letters, next) = try await DeadLetterQueue(redis: context.redis, keys: context.configuration.redisKeys, stream: stream).page(
                after: after, limit: limit, filter: .init(account: account, type: type, error: error))
            await context.redis.shutdown()
            if json {
                printJSON(.object(["dead_letters": .array(letters.map(\.summary)), "next": next.map(JSONValue.string) ?? .null]))
                return
            }
            if letters.isEmpty { print("no dead letters") }
            for letter in letters {
                print(
                    "\(shown(letter.id))  \(shown(letter.type ?? "?"))  account \(shown(letter.account ?? "?"))  deliveries \(shown(letter.letter.deliveries.map(String.init) ?? "?"))  \(shown(letter.letter.error ?? ""))"
                )
            }
            if let next { print("more: roundupctl dlq list --stream \(stream.rawValue) --after \(next)") }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete dead letters for good, by id.")
        @Option(help: "The stream whose dead letters: webhooks (the default), jobs or push.") var stream: RoundupStream = .webhooks
        @Argument(help: "The dead letters' ids.") var ids: [String]
        @Flag var json = false
        func validate() throws {
            guard !ids.isEmpty else { throw ValidationError("name at least one dead letter id (roundupctl dlq list)") }
        }
        func run() async throws {
            let context = try Context.make()
            let deleted = try await DeadLetterQueue(redis: context.redis, keys: context.configuration.redisKeys, stream: stream).delete(ids: ids)
            await context.redis.shutdown()
            report("deleted", deleted, json: json, text: "deleted \(deleted) of \(ids.count)")
        }
    }

    struct Show: AsyncParsableCommand {
        @Option(help: "The stream whose dead letters: webhooks (the default), jobs or push.") var stream: RoundupStream = .webhooks
        @Argument(help: "The dead letter's id.") var id: String
        func run() async throws {
            let context = try Context.make()
            guard let letter = try await DeadLetterQueue(redis: context.redis, keys: context.configuration.redisKeys, stream: stream).show(id: id)
            else {
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
        @Option(help: "The stream whose dead letters: webhooks (the default), jobs or push.") var stream: RoundupStream = .webhooks
        @Argument(help: "Ids to replay; none means all.") var ids: [String] = []
        @Flag(help: "Do not ask.") var yes = false
        @Flag(help: "One JSON object; implies --yes.") var json = false
        func run() async throws {
            let context = try Context.make()
            let queue = DeadLetterQueue(redis: context.redis, keys: context.configuration.redisKeys, stream: stream)
            let total = ids.isEmpty ? try await queue.count() : ids.count
            if !yes && !json {
                print("Replay \(total) dead letter(s) into \(stream.key(context.configuration.redisKeys))? [y/N] ", terminator: "")
                guard readLine()?.lowercased().hasPrefix("y") == true else {
                    print("nothing replayed")
                    await context.redis.shutdown()
                    return
                }
            }
            let replayed = try await queue.replay(ids: ids.isEmpty ? nil : ids) { done in
                if total > 100 { FileHandle.standardError.write(Data("replayed \(done)/\(total)\n".utf8)) }
            }
            await context.redis.shutdown()
            report("replayed", replayed, json: json, text: "replayed \(replayed)")
        }
    }

    struct Purge: AsyncParsableCommand {
        @Option(help: "The stream whose dead letters: webhooks (the default), jobs or push.") var stream: RoundupStream = .webhooks
        @Flag(help: "Required: purging cannot be undone.") var yes = false
        @Flag var json = false
        func validate() throws {
            guard yes else { throw ValidationError("purge deletes every dead letter for good; add --yes") }
        }
        func run() async throws {
            let context = try Context.make()
            let purged = try await DeadLetterQueue(redis: context.redis, keys: context.configuration.redisKeys, stream: stream).purge()
            await context.redis.shutdown()
            report("purged", purged, json: json, text: "purged \(purged)")
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
                    for job in jobs { print(Jobs.line(job, now: now, staleAfter: staleAfter)) }
                }
                await context.redis.shutdown()
            }
        }
    }

    /// One line for people.
    static func line(_ job: JobRecord, now: Date, staleAfter: TimeInterval) -> String {
        let age = Timestamp.date(job.updatedAt).map { String(format: "%.0f s", now.timeIntervalSince($0)) } ?? "?"
        return
            "\(job.id)  \(job.kind.rawValue)  \(job.status.rawValue)\(job.isStale(now: now, after: staleAfter) ? " (STALE)" : "")  \(job.processed)/\(job.total)  heartbeat \(age) ago  account \(job.accountID)\(job.error.map { "  error: \(shown($0))" } ?? "")"
    }

    /// Whether a job will still change: queued, or running with a live heartbeat.
    static func isUnderWay(_ job: JobRecord, now: Date, staleAfter: TimeInterval) -> Bool {
        job.status == .queued || (job.status == .running && !job.isStale(now: now, after: staleAfter))
    }

    struct Show: AsyncParsableCommand {
        @Argument var id: String
        @Option(help: "Show it again every N seconds until it is no longer queued or running.") var watch: Double?
        @Flag var json = false
        func validate() throws {
            if let watch, !(0.1...3600).contains(watch) { throw ValidationError("--watch must be 0.1 to 3600 seconds") }
        }
        func run() async throws {
            let context = try Context.make()
            await context.redis.shutdown()
            let staleAfter = TimeInterval(context.configuration.jobStaleSeconds)
            try await Stores.withStore(configuration: context.configuration) { store in
                while true {
                    guard let job = try await store.jobs(limit: 1, id: id).first else { throw ValidationError("no job \(id)") }
                    let now = Date()
                    if json {
                        printJSON(Jobs.json(job, now: now, staleAfter: staleAfter))
                    } else {
                        print(Jobs.line(job, now: now, staleAfter: staleAfter))
                    }
                    guard let watch, Jobs.isUnderWay(job, now: now, staleAfter: staleAfter) else { return }
                    try await Task.sleep(for: .milliseconds(Int(watch * 1000)))
                }
            }
        }
    }
}

struct Accounts: AsyncParsableCommand {
    static let configuration = CommandConfiguration(subcommands: [List.self, Export.self])

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write an account's whole data as JSON (credentials and APNs tokens masked), as GET /dailyroundup/account/export does.")
        @Argument(help: "The account id.") var accountID: String
        @Option(name: .shortAndLong, help: "Write to this file (created with mode 0600) instead of standard output.") var output: String?

        func run() async throws {
            let context = try Context.make()
            try await Stores.withStore(configuration: context.configuration) { store in
                await context.redis.shutdown()  // the export reads only the store
                let handle: FileHandle
                if let output {
                    guard FileManager.default.createFile(atPath: output, contents: nil, attributes: [.posixPermissions: 0o600]),
                        let file = FileHandle(forWritingAtPath: output)
                    else { throw ValidationError("cannot write \(output)") }
                    handle = file
                } else {
                    handle = FileHandle.standardOutput
                }
                let found = try await AccountExport(store: store).write(accountID: accountID) { handle.write(Data($0.utf8)) }
                if output != nil { try handle.close() }
                guard found else {
                    if let output { try? FileManager.default.removeItem(atPath: output) }
                    throw ValidationError("no account \(accountID)")
                }
                if output == nil { handle.write(Data("\n".utf8)) }
            }
        }
    }

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
        @Flag var json = false
        func run() async throws {
            let context = try Context.make()
            try await Stores.withStore(configuration: context.configuration) { store in
                var logger = Logger(label: "roundupctl")
                logger.logLevel = .error
                try await RoutePublisher.publishAll(store: store, redis: context.redis, keys: context.configuration.redisKeys, logger: logger)
                let snapshot = try await store.routingSnapshot()
                if json {
                    printJSON(.object(["secrets": .number(Double(snapshot.secrets.count)), "routes": .number(Double(snapshot.routes.count))]))
                } else {
                    print("published \(snapshot.secrets.count) secrets and \(snapshot.routes.count) routes")
                }
                await context.redis.shutdown()
            }
        }
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply the store's migrations.")
    @Flag var json = false
    func run() async throws {
        let context = try Context.make()
        try await Stores.withStore(configuration: context.configuration) { _ in }
        if json { printJSON(.object(["migrated": true])) } else { print("store is at the latest schema") }
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
    @Flag(help: "One JSON object: {ok, passed, problems}.") var json = false
    func run() async throws {
        let context = try Context.make()
        var problems: [String] = []
        var passed: [String] = []
        do {
            _ = try await context.redis.send(RedisCommand("PING"), timeout: .seconds(2))
            passed.append("redis \(try RedisConfiguration(url: context.configuration.redisURL).endpoint)")
        } catch {
            problems.append("redis: \(error)")
        }
        do {
            problems += try await Stores.withStore(configuration: context.configuration) { store in
                var problems: [String] = []
                try await store.ping()
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
            passed.append("store \(context.configuration.postgresURL?.masked ?? context.configuration.databaseURL)")
        } catch {
            problems.append("store: \(error)")
        }
        if context.configuration.publicURL == nil { problems.append("ROUNDUP_PUBLIC_URL is not set (the ingress and the API need it)") }
        problems += Self.apnsProblems(context.configuration)
        if context.configuration.missingAPNsKeys.isEmpty, Self.apnsProblems(context.configuration).isEmpty {
            passed.append(
                "apns key \(context.configuration.apnsKeyID ?? "") (team \(context.configuration.apnsTeamID ?? ""), topic \(context.configuration.apnsTopic ?? ""))"
            )
        }
        await context.redis.shutdown()
        if json {
            printJSON(
                .object([
                    "ok": .bool(problems.isEmpty), "passed": .array(passed.map { .string(shown($0)) }),
                    "problems": .array(problems.map { .string(shown($0)) }),
                ]))
        } else {
            for item in passed { print("ok    \(item)") }
            for problem in problems { print("FAIL  \(problem)") }
        }
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
    @Flag(help: "Wait for the reconciliations to end, showing progress; exit 1 if any failed.") var wait = false
    @Flag var json = false
    func run() async throws {
        let context = try Context.make()
        defer { Task { await context.redis.shutdown() } }
        let staleAfter = TimeInterval(context.configuration.jobStaleSeconds)
        let failed = try await Stores.withStore(configuration: context.configuration) { store -> Bool in
            let lists = try await store.allSyncLists().map(\.list).filter { list == nil || $0.id == list }
            guard !lists.isEmpty else { throw ValidationError(list.map { "no list \($0)" } ?? "no lists") }
            var queued: [String] = []
            let queue = JobQueue(store: store, redis: context.redis, keys: context.configuration.redisKeys, staleAfter: staleAfter)
            for item in lists {
                guard
                    case .created(let job) = try await queue.submit(
                        accountID: item.accountID, kind: .reconcile, payload: .object(["sync_list_id": .string(item.id)]), total: 1)
                else { continue }
                queued.append(job.id)
                if !json { print("queued \(job.id) for list \(item.id) (\(shown(item.name))); roundupctl jobs show \(job.id)") }
            }
            var jobs: [JobRecord] = []
            var lastProgress = ""
            while true {
                jobs = []
                for id in queued { jobs += try await store.jobs(limit: 1, id: id) }
                let now = Date()
                let underWay = jobs.filter { Jobs.isUnderWay($0, now: now, staleAfter: staleAfter) }.count
                let errors = jobs.filter { $0.status == .error || $0.isStale(now: now, after: staleAfter) }.count
                guard wait, underWay > 0 else { break }
                let progress = "reconciled \(jobs.count - underWay)/\(jobs.count) list(s), \(errors) failed"
                if !json && progress != lastProgress { print(progress) }
                lastProgress = progress
                try await Task.sleep(for: .milliseconds(500))
            }
            let now = Date()
            if json { printJSON(.object(["jobs": .array(jobs.map { Jobs.json($0, now: now, staleAfter: staleAfter) })])) }
            guard wait else { return false }
            let failures = jobs.filter { $0.status == .error || $0.isStale(now: now, after: staleAfter) }
            if !json {
                print("reconciled \(jobs.count - failures.count)/\(jobs.count) list(s)")
                for job in failures { print("FAIL  \(Jobs.line(job, now: now, staleAfter: staleAfter))") }
            }
            return !failures.isEmpty
        }
        if failed { throw ExitCode(1) }
    }
}

struct Pending: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Entries delivered and not yet acknowledged, oldest first: with whom, idle how long, delivered how often, last error.")
    @Argument(help: "webhooks, jobs or push.") var stream: RoundupStream = .webhooks
    @Option(help: "At most this many.") var limit = 50
    @Option(help: "Start after this id (the `next` of the previous page).") var after: String?
    @Option(help: "Only entries delivered at least this often (2: failing ones).") var minDeliveries = 1
    @Flag var json = false
    func validate() throws {
        guard (1...10_000).contains(limit) else { throw ValidationError("--limit must be 1 to 10000") }
    }
    func run() async throws {
        let context = try Context.make()
        let (entries, next) = try await PendingInspector.page(
            stream, redis: context.redis, keys: context.configuration.redisKeys, after: after, limit: limit, minDeliveries: minDeliveries)
        await context.redis.shutdown()
        if json {
            printJSON(
                .object(["stream": .string(stream.rawValue), "pending": .array(entries.map(\.json)), "next": next.map(JSONValue.string) ?? .null]))
            return
        }
        if entries.isEmpty { print("nothing pending on \(stream.rawValue)") }
        for entry in entries {
            print(
                "\(entry.id)  \(shown(entry.type ?? "?"))  account \(shown(entry.account ?? "?"))  consumer \(shown(entry.consumer))  idle \(String(format: "%.1f s", Double(entry.idleMilliseconds) / 1000))  deliveries \(entry.deliveries)\(entry.lastError.map { "  \(shown($0))" } ?? "")"
            )
        }
        if let next { print("more: roundupctl pending \(stream.rawValue) --after \(next)") }
    }
}

/// `pause` and `resume`: set or clear a stream's flag and say whether that changed anything.
func switchPause(_ stream: RoundupStream, paused: Bool, json: Bool) async throws {
    let context = try Context.make()
    let pauses = StreamPauses(redis: context.redis, keys: context.configuration.redisKeys)
    let changed = paused ? try await pauses.pause(stream) : try await pauses.resume(stream)
    await context.redis.shutdown()
    if json {
        printJSON(.object(["stream": .string(stream.rawValue), "paused": .bool(paused), "changed": .bool(changed)]))
    } else if paused {
        print(changed ? "paused \(stream.rawValue); roundupctl resume \(stream.rawValue) to go on" : "\(stream.rawValue) was already paused")
    } else {
        print(changed ? "resumed \(stream.rawValue)" : "\(stream.rawValue) was not paused")
    }
}

struct Pause: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Hold a stream: workers (or pushers) read nothing new within a second and keep what they hold pending; the ingress keeps accepting.")
    @Argument(help: "webhooks, jobs or push.") var stream: RoundupStream
    @Flag var json = false
    func run() async throws { try await switchPause(stream, paused: true, json: json) }
}

struct Resume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Let a paused stream run again: what waited is processed, each entry once.")
    @Argument(help: "webhooks, jobs or push.") var stream: RoundupStream
    @Flag var json = false
    func run() async throws { try await switchPause(stream, paused: false, json: json) }
}

struct Consumers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The consumers of each stream's group; prune those of processes that are gone.", subcommands: [List.self, Prune.self])

    static func json(_ consumer: StreamReport.Consumer, stream: RoundupStream) -> JSONValue {
        .object([
            "stream": .string(stream.rawValue), "consumer": .string(consumer.name), "pending": .number(Double(consumer.pending)),
            "idle_ms": .number(Double(consumer.idleMilliseconds)),
        ])
    }

    struct List: AsyncParsableCommand {
        @Flag var json = false
        func run() async throws {
            let context = try Context.make()
            let reports = try await QueueInspector.reports(redis: context.redis, keys: context.configuration.redisKeys)
            await context.redis.shutdown()
            if json {
                printJSON(.array(reports.flatMap { report in report.consumers.map { Consumers.json($0, stream: report.name) } }))
                return
            }
            for report in reports {
                for consumer in report.consumers {
                    print(
                        "\(report.name.rawValue)  \(shown(consumer.name))  pending \(consumer.pending)  idle \(String(format: "%.0f s", Double(consumer.idleMilliseconds) / 1000))"
                    )
                }
            }
        }
    }

    struct Prune: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove consumers idle this long that hold no pending entry (a consumer holding entries is never removed).")
        @Option(help: "Idle at least this many seconds (a live consumer reads every second; a paused one does not).") var idle = 3600
        @Argument(help: "webhooks, jobs or push; all three when omitted.") var streams: [RoundupStream] = []
        @Flag(help: "Only say which.") var dryRun = false
        @Flag var json = false
        func validate() throws {
            guard idle >= 60 else { throw ValidationError("--idle must be at least 60 seconds: a busy consumer may be idle for a while") }
        }
        func run() async throws {
            let context = try Context.make()
            var pruned: [ConsumerPruner.Pruned] = []
            for stream in streams.isEmpty ? RoundupStream.allCases : streams {
                pruned += try await ConsumerPruner.prune(
                    stream, redis: context.redis, keys: context.configuration.redisKeys, idleAtLeast: idle * 1000, dryRun: dryRun)
            }
            await context.redis.shutdown()
            if json {
                printJSON(
                    .object([
                        "dry_run": .bool(dryRun),
                        "pruned": .array(
                            pruned.map {
                                .object([
                                    "stream": .string($0.stream.rawValue), "consumer": .string($0.consumer),
                                    "idle_ms": .number(Double($0.idleMilliseconds)),
                                ])
                            }),
                    ]))
                return
            }
            for item in pruned { print("\(dryRun ? "would prune" : "pruned")  \(item.stream.rawValue)  \(shown(item.consumer))") }
            print("\(pruned.count) consumer(s) \(dryRun ? "to prune" : "pruned")")
        }
    }
}

struct DashboardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dashboard",
        abstract: "Serve the operators' web dashboard: streams, charts, dead letters, failing entries, jobs, pause and resume.",
        discussion: """
            Listens on 127.0.0.1:9180 by default; reach it with `ssh -L 9180:127.0.0.1:9180 host` or \
            `kubectl port-forward`. Any other address needs ROUNDUP_DASHBOARD_TOKEN (the password; any user name).
            """)
    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on.") var port = 9180
    func run() async throws {
        let configuration: RoundupConfiguration
        do {
            configuration = try RoundupConfiguration()
        } catch {
            throw CleanExit.message("\(error)")
        }
        RoundupLogging.bootstrap(level: configuration.logLevel, format: configuration.logFormat)
        try await Dashboard.run(configuration: configuration, host: host, port: port, logger: Logger(label: "roundup.dashboard"))
    }
}
