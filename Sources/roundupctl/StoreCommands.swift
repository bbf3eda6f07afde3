/// Commands about what the store holds: jobs, accounts, lists, reconciliations, routes, migrations, the check.
import ArgumentParser
import Foundation
import Logging
import RoundupCore
import RoundupDatabase
import RoundupJobs
import RoundupOps
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams

struct Jobs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Background jobs: status, progress, heartbeat age, stale or not.", subcommands: [List.self, Show.self])

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
                    printJSON(.array(jobs.map { JobsReport.json($0, now: now, staleAfter: staleAfter) }))
                } else if jobs.isEmpty {
                    print("no jobs")
                } else {
                    for job in jobs { print(JobsReport.line(job, now: now, staleAfter: staleAfter)) }
                }
                await context.redis.shutdown()
            }
        }
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
                        printJSON(JobsReport.json(job, now: now, staleAfter: staleAfter))
                    } else {
                        print(JobsReport.line(job, now: now, staleAfter: staleAfter))
                    }
                    guard let watch, JobsReport.isUnderWay(job, now: now, staleAfter: staleAfter) else { return }
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
                if json {
                    printJSON(.array(accounts.map(AccountsReport.json)))
                } else {
                    for account in accounts { print(AccountsReport.line(account)) }
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
    static let configuration = CommandConfiguration(
        abstract: "Reach Redis and the store; check stored credentials look right. Exits 1 when anything is wrong.")
    @Flag(help: "One JSON object: {ok, passed, problems}.") var json = false
    func run() async throws {
        let context = try Context.make()
        let check = await DeploymentCheck.run(configuration: context.configuration, redis: context.redis)
        await context.redis.shutdown()
        if json {
            printJSON(
                .object([
                    "ok": .bool(check.ok), "passed": .array(check.passed.map { .string(shown($0)) }),
                    "problems": .array(check.problems.map { .string(shown($0)) }),
                ]))
        } else {
            for item in check.passed { print("ok    \(item)") }
            for problem in check.problems { print("FAIL  \(problem)") }
        }
        if !check.ok { throw ExitCode(1) }
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
                printJSON(.array(lists.map { ListsReport.json($0.list, needsAttention: $0.needsAttention) }))
                return
            }
            if lists.isEmpty { print("no lists") }
            for (list, flagged) in lists { print(ListsReport.line(list, needsAttention: flagged)) }
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
            let run = ReconcileRun(
                store: store, queue: JobQueue(store: store, redis: context.redis, keys: context.configuration.redisKeys, staleAfter: staleAfter),
                staleAfter: staleAfter)
            let lists = try await run.lists(list)
            guard !lists.isEmpty else { throw ValidationError(list.map { "no list \($0)" } ?? "no lists") }
            let queued = try await run.queue(lists)
            if !json {
                for (job, item) in queued { print("queued \(job) for list \(item.id) (\(shown(item.name))); roundupctl jobs show \(job)") }
            }
            let ids = queued.map(\.job)
            let jobs = wait ? try await run.waitUntilEnded(ids) { if !json { print($0) } } : try await run.jobs(ids)
            let now = Date()
            if json { printJSON(.object(["jobs": .array(jobs.map { JobsReport.json($0, now: now, staleAfter: staleAfter) })])) }
            guard wait else { return false }
            let failures = jobs.filter { JobsReport.failed($0, now: now, staleAfter: staleAfter) }
            if !json {
                print("reconciled \(jobs.count - failures.count)/\(jobs.count) list(s)")
                for job in failures { print("FAIL  \(JobsReport.line(job, now: now, staleAfter: staleAfter))") }
            }
            return !failures.isEmpty
        }
        if failed { throw ExitCode(1) }
    }
}
