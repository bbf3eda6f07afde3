/// Commands about the streams: queues, pending entries, dead letters, pauses, consumers.
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

struct Queues: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Length, lag, pending, oldest pending age, consumers and dead letters of the webhook, job and push streams.")

    @Flag(help: "One JSON object, for tools.") var json = false
    @Option(help: "Refresh every N seconds until interrupted.") var watch: Double?
    @Flag(help: "Each webhook shard's figures too (JSON: `shards`).") var shards = false

    func run() async throws {
        let context = try Context.make()
        defer { Task { await context.redis.shutdown() } }
        repeat {
            let reports = try await QueueInspector.reports(redis: context.redis, keys: context.configuration.redisKeys, perShard: shards)
            let accounts = try await StreamPauses(redis: context.redis, keys: context.configuration.redisKeys).pausedAccounts()
                .sorted { $0.key < $1.key }
            if json {
                printJSON(
                    .object([
                        "streams": .array(reports.map(\.json)),
                        "paused_accounts": .array(
                            accounts.map { .object(["account": .string($0.key), "since": .string(Timestamp.string($0.value))]) }),
                    ]))
            } else {
                if watch != nil { print("\u{1B}[2J\u{1B}[H" + Date().formatted(.iso8601)) }
                print(reports.map(QueueInspector.table).joined(separator: "\n\n"))
                for (account, since) in accounts { print("account \(shown(account)) paused since \(Timestamp.string(since))") }
            }
            if let watch { try await Task.sleep(for: .milliseconds(Int(watch * 1000))) }
        } while watch != nil
    }
}

/// Whose dead letters a `dlq` command reads: `--stream webhooks|jobs|push`.
struct DeadLetterStream: ParsableArguments {
    @Option(help: "The stream whose dead letters: webhooks (the default), jobs or push.") var stream: RoundupStream = .webhooks

    func queue(_ context: Context) -> DeadLetterQueue {
        DeadLetterQueue(redis: context.redis, keys: context.configuration.redisKeys, stream: stream)
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
        @OptionGroup var dead: DeadLetterStream
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
            let (letters, next) = try await dead.queue(context).page(
                after: after, limit: limit, filter: .init(account: account, type: type, error: error))
            await context.redis.shutdown()
            if json {
                printJSON(.object(["dead_letters": .array(letters.map(\.summary)), "next": next.map(JSONValue.string) ?? .null]))
                return
            }
            if letters.isEmpty { print("no dead letters") }
            for letter in letters {
                print(
                    "\(shown(letter.id))  \(shown(letter.type ?? "?"))  account \(shown(letter.account ?? "?"))  deliveries \(shown(letter.letter.deliveries.map(String.init) ?? "?"))  \(shown(letter.letter.error ?? ""))\(letter.letter.attempts.count > 1 ? "  (\(letter.letter.attempts.count) attempts: dlq show)" : "")"
                )
            }
            if let next { print("more: roundupctl dlq list --stream \(dead.stream.rawValue) --after \(next)") }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete dead letters for good, by id.")
        @OptionGroup var dead: DeadLetterStream
        @Argument(help: "The dead letters' ids.") var ids: [String]
        @Flag var json = false
        func validate() throws {
            guard !ids.isEmpty else { throw ValidationError("name at least one dead letter id (roundupctl dlq list)") }
        }
        func run() async throws {
            let context = try Context.make()
            let deleted = try await dead.queue(context).delete(ids: ids)
            await context.redis.shutdown()
            report("deleted", deleted, json: json, text: "deleted \(deleted) of \(ids.count)")
        }
    }

    struct Show: AsyncParsableCommand {
        @OptionGroup var dead: DeadLetterStream
        @Argument(help: "The dead letter's id.") var id: String
        func run() async throws {
            let context = try Context.make()
            guard let letter = try await dead.queue(context).show(id: id)
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
        static let configuration = CommandConfiguration(
            abstract: "Put dead letters back on their stream: by id, those matching filters (try --dry-run first), or all.")
        @OptionGroup var dead: DeadLetterStream
        @Argument(help: "Ids to replay; none means all (or all that match the filters).") var ids: [String] = []
        @Option(help: "Only this account's.") var account: String?
        @Option(help: "Only this Trello action type (e.g. updateCard).") var type: String?
        @Option(help: "Only those whose error contains this text (any case).") var error: String?
        @Option(help: "Only those that failed at or after this time: ISO 8601 (2026-12-07T02:00:00Z) or an age (30m, 2h, 1d).")
        var since: String?
        @Option(help: "Only those that failed before this time: ISO 8601 or an age.") var until: String?
        @Flag(help: "Count what would be replayed (by type and error), replay nothing.") var dryRun = false
        @Flag(help: "Do not ask.") var yes = false
        @Flag(help: "One JSON object; implies --yes.") var json = false

        var filter: DeadLetterQueue.Filter {
            get throws {
                .init(
                    account: account, type: type, error: error, since: try since.map { try Self.time($0, "--since") },
                    until: try until.map { try Self.time($0, "--until") })
            }
        }

        static func time(_ text: String, _ option: String) throws -> Int {
            guard let moment = DeadLetterQueue.Filter.moment(text) else { throw ValidationError(DeadLetterQueue.Filter.unreadable(option, text)) }
            return moment
        }

        func validate() throws {
            let filter = try filter
            if !ids.isEmpty && !filter.isEmpty { throw ValidationError("name ids or filters, not both") }
            if dryRun && !ids.isEmpty { throw ValidationError("--dry-run counts what filters match: name filters, not ids") }
        }

        func run() async throws {
            let context = try Context.make()
            let queue = dead.queue(context)
            let filter = try filter
            if !filter.isEmpty || dryRun {
                try await replayMatching(filter, queue: queue)
                await context.redis.shutdown()
                return
            }
            let total = ids.isEmpty ? try await queue.count() : ids.count
            if !yes && !json {
                print("Replay \(total) dead letter(s) into the \(dead.stream.rawValue) stream? [y/N] ", terminator: "")
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

        /// By filter: a dry run first when asked (or to count for the question), then the replay.
        func replayMatching(_ filter: DeadLetterQueue.Filter, queue: DeadLetterQueue) async throws {
            let counted = try await queue.replay(matching: filter, dryRun: true)
            if dryRun {
                if json { printJSON(counted.json(dryRun: true)) } else { print(Self.describe(counted, verb: "would replay")) }
                return
            }
            if !yes && !json {
                print(Self.describe(counted, verb: "matching:"))
                print("Replay them into the \(dead.stream.rawValue) stream? [y/N] ", terminator: "")
                guard readLine()?.lowercased().hasPrefix("y") == true else {
                    print("nothing replayed")
                    return
                }
            }
            let done = try await queue.replay(matching: filter, dryRun: false) { done in
                if counted.matched > 100 { FileHandle.standardError.write(Data("replayed \(done)/\(counted.matched)\n".utf8)) }
            }
            if json { printJSON(done.json(dryRun: false)) } else { print(Self.describe(done, verb: "replayed")) }
        }

        static func describe(_ selection: DeadLetterQueue.Selection, verb: String) -> String {
            func counts(_ byKey: [String: Int]) -> String {
                byKey.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.map { "\(shown($0.key)) \($0.value)" }
                    .joined(separator: ", ")
            }
            var lines = ["\(verb) \(verb == "replayed" ? selection.replayed : selection.matched) dead letter(s)"]
            if selection.matched > 0 {
                lines.append("  by type: \(counts(selection.byType))")
                lines.append("  by error: \(counts(selection.byError))")
                lines.append("  ids: \(selection.ids.prefix(10).map(shown).joined(separator: " "))\(selection.matched > 10 ? " …" : "")")
            }
            return lines.joined(separator: "\n")
        }
    }

    struct Purge: AsyncParsableCommand {
        @OptionGroup var dead: DeadLetterStream
        @Flag(help: "Required: purging cannot be undone.") var yes = false
        @Flag var json = false
        func validate() throws {
            guard yes else { throw ValidationError("purge deletes every dead letter for good; add --yes") }
        }
        func run() async throws {
            let context = try Context.make()
            let purged = try await dead.queue(context).purge()
            await context.redis.shutdown()
            report("purged", purged, json: json, text: "purged \(purged)")
        }
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

/// What `pause` and `resume` name: a stream (`webhooks`), or one account (`account ID`).
struct PauseTarget: ParsableArguments {
    @Argument(help: "webhooks, jobs or push; or `account` and the account's id.") var target: String
    @Argument(help: "The account's id (after `account`).") var account: String?

    enum Target { case stream(RoundupStream), account(String) }

    func validate() throws { _ = try resolved() }

    func resolved() throws -> Target {
        if target == "account" {
            guard let account, !account.isEmpty else { throw ValidationError("name the account: roundupctl pause account ID") }
            return .account(account)
        }
        guard let stream = RoundupStream(rawValue: target), account == nil else {
            throw ValidationError("name webhooks, jobs or push, or `account ID`")
        }
        return .stream(stream)
    }
}

struct Pause: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Hold a stream: workers (or pushers) read nothing new within a second and keep what they hold pending; the ingress keeps accepting. "
            + "`pause account ID` holds one account: its webhooks are accepted and wait in their shard, its jobs and pushes wait, the others flow.")
    @OptionGroup var what: PauseTarget
    @Flag var json = false
    func run() async throws {
        switch try what.resolved() {
        case .stream(let stream): try await switchPause(stream, paused: true, json: json)
        case .account(let account): try await switchAccountPause(account, paused: true, json: json)
        }
    }
}

struct Resume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Let a paused stream (or `account ID`) run again: what waited is processed, each entry once.")
    @OptionGroup var what: PauseTarget
    @Flag var json = false
    func run() async throws {
        switch try what.resolved() {
        case .stream(let stream): try await switchPause(stream, paused: false, json: json)
        case .account(let account): try await switchAccountPause(account, paused: false, json: json)
        }
    }
}

/// `pause account` and `resume account`: set or clear the account's flag and say whether that changed anything.
func switchAccountPause(_ account: String, paused: Bool, json: Bool) async throws {
    let context = try Context.make()
    let pauses = StreamPauses(redis: context.redis, keys: context.configuration.redisKeys)
    let changed = paused ? try await pauses.pause(account: account) : try await pauses.resume(account: account)
    await context.redis.shutdown()
    if json {
        printJSON(.object(["account": .string(account), "paused": .bool(paused), "changed": .bool(changed)]))
    } else if paused {
        print(
            changed
                ? "paused account \(shown(account)): its webhooks wait in their shard, its jobs and pushes wait; roundupctl resume account \(shown(account)) to go on"
                : "account \(shown(account)) was already paused")
    } else {
        print(
            changed
                ? "resumed account \(shown(account)): what waited is taken up within the claim timeout" : "account \(shown(account)) was not paused")
    }
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

struct Find: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Where a webhook event is now, by Trello action id, card id or account: waiting in its shard, pending with whom, "
            + "dead-lettered with its error, or applied (what it changed, from the activity history).")
    @Option(help: "Trello's action id (the webhook's action.id).") var action: String?
    @Option(help: "The card the action is about.") var card: String?
    @Option(help: "The account's id.") var account: String?
    @Option(help: "At most this many of each place.") var limit = 50
    @Flag var json = false

    func validate() throws {
        guard action != nil || card != nil || account != nil else { throw ValidationError("name --action, --card or --account") }
        guard (1...1000).contains(limit) else { throw ValidationError("--limit must be 1 to 1000") }
    }

    func run() async throws {
        let context = try Context.make()
        defer { Task { await context.redis.shutdown() } }
        let query = EventFinder.Query(actionID: action, cardID: card, account: account)
        let (found, searched) = try await Stores.withStore(configuration: context.configuration) { store in
            try await EventFinder.find(query, redis: context.redis, keys: context.configuration.redisKeys, store: store, limit: limit)
        }
        await context.redis.shutdown()
        if json {
            printJSON(.object(["found": .array(found.map(\.json)), "searched_accounts": .number(Double(searched))]))
            return
        }
        if found.isEmpty { print("nothing found in the streams, the dead letters or the history of \(searched) account(s)") }
        for event in found {
            var line = "\(event.place.rawValue.replacingOccurrences(of: "_", with: " "))"
            if let id = event.id { line += "  \(shown(id))" }
            line += "  \(shown(event.type ?? "?"))  account \(shown(event.account ?? "?"))  action \(shown(event.actionID ?? "?"))"
            if let card = event.cardID { line += "  card \(shown(card))" }
            if let trace = event.traceID { line += "  trace \(trace)" }
            switch event.place {
            case .waiting: line += "  received \(event.receivedAt ?? "?")"
            case .pending:
                line += "  with \(shown(event.consumer ?? "?")) for \(String(format: "%.1f s", Double(event.idleMilliseconds ?? 0) / 1000))"
                line += "  deliveries \(event.deliveries ?? 0)\(event.error.map { "  \(shown($0))" } ?? "")"
            case .deadLetter: line += "  deliveries \(event.deliveries ?? 0)  \(shown(event.error ?? ""))"
            case .applied:
                if let change = event.activity {
                    line += "  \(change.createdAt)  \(change.kind.rawValue)\(change.field.map { " \(shown($0))" } ?? "")"
                    if let message = change.message { line += "  \(shown(message))" }
                }
            }
            print(line)
            for attempt in event.attempts {
                print(
                    "    attempt \(Timestamp.string(Date(timeIntervalSince1970: Double(attempt.at) / 1000)))  by \(shown(attempt.consumer))  \(shown(attempt.error.replacingOccurrences(of: "\t", with: ": ")))"
                )
            }
        }
    }
}
