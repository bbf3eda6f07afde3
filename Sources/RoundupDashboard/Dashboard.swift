import Crypto
import Foundation
import HTTPTypes
public import Hummingbird
import Logging
import Mustache
import NIOCore
import RoundupCore
import RoundupOps
public import RoundupRedis
import RoundupRuntime
public import RoundupStore
public import RoundupStreams

/// The operators' web dashboard (`roundupctl dashboard`), in the spirit of Sidekiq Web and asynqmon: the three streams
/// with their depth, waits and pauses, charts of depth and throughput, dead letters to replay or delete, entries failing
/// now, sync jobs and accounts that need attention. Server-rendered HTML, no script, nothing from elsewhere.
///
/// It is a process of its own rather than a route of roundup-api: the API faces the internet and serves the apps with
/// their tokens, while this reads every account's queues and can replay and delete; it listens on loopback by default
/// (reached through `ssh -L` or `kubectl port-forward`) and asks for `ROUNDUP_DASHBOARD_TOKEN` when given one.
public struct Dashboard: Sendable {
    public struct Options: Sendable {
        public var keys: RedisKeys
        /// The operator's password (HTTP Basic, the user name is who they say they are, logged with each action); nil
        /// asks none: loopback only, both the address listened on (`DashboardCommand`) and the Host names answered
        /// (`DashboardGuard`).
        public var token: String?
        /// The viewer's password: every page, no form; each changing request refused (403) and logged.
        public var viewerToken: String?
        /// The path the dashboard is served under behind a proxy (`/ops/roundup`), or "": every link, asset, form and
        /// redirect is under it, and a request is answered with it or without it (a proxy that strips it).
        public var basePath: String
        /// Seconds between the overview's refreshes.
        public var refreshSeconds: Int
        public var jobStaleSeconds: Int

        public init(
            keys: RedisKeys, token: String?, viewerToken: String? = nil, basePath: String = "", refreshSeconds: Int = 5, jobStaleSeconds: Int
        ) {
            self.keys = keys
            self.token = token
            self.viewerToken = viewerToken
            self.basePath = basePath
            self.refreshSeconds = refreshSeconds
            self.jobStaleSeconds = jobStaleSeconds
        }
    }

    let options: Options
    let redis: RedisClient
    let store: any ServerStore
    public let history: DashboardHistory
    /// The token every form carries back (a random value of this process, compared in constant time): a page from
    /// another site cannot know it, so it cannot make an operator's browser replay or delete.
    let csrf: String
    let templates: MustacheLibrary

    public init(options: Options, redis: RedisClient, store: any ServerStore, history: DashboardHistory) {
        self.options = options
        self.redis = redis
        self.store = store
        self.history = history
        templates = DashboardTemplates.library(basePath: options.basePath)
        csrf = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0).map { String(format: "%02x", $0) }.joined() }
    }

    var deadLetters: DeadLetterQueue { DeadLetterQueue(redis: redis, keys: options.keys) }

    public func router() -> Router<DashboardContext> {
        let router = Router(context: DashboardContext.self)
        router.add(middleware: DashboardGuard(token: options.token, viewerToken: options.viewerToken, basePath: options.basePath, csrf: csrf))
        // At the root (behind a proxy that strips the base path, or none) and under the base path (one that passes it).
        addRoutes(to: router)
        if !options.basePath.isEmpty { addRoutes(to: router.group(RouterPath(String(options.basePath.dropFirst())))) }
        return router
    }

    func addRoutes(to router: some RouterMethods<DashboardContext>) {
        router.get("healthz") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: #"{"status":"ok"}"#)))
        }
        router.get("static/dashboard.css") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/css; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: DashboardTemplates.stylesheet)))
        }
        router.get("/") { request, context in try await overview(flash: request.uri.queryParameters.get("done"), context: context) }
        router.get("queues.json") { _, _ in
            let reports = try await QueueInspector.reports(redis: redis, keys: options.keys)
            return Self.json(.object(["streams": .array(reports.map(\.json))]))
        }
        router.get("dead-letters") { request, context in try await deadLetterPage(request, context: context) }
        router.get("pending") { request, context in try await pendingPage(request, context: context) }
        router.get("find") { request, context in try await findPage(request, context: context) }
        router.get("jobs") { request, context in try await jobsPage(flash: request.uri.queryParameters.get("done"), context: context) }
        router.post("streams/:stream/:action") { request, context in
            let form = try await DashboardForm.read(request, csrf: csrf)
            guard let stream = context.parameters.get("stream").flatMap(RoundupStream.init(rawValue:)) else {
                throw HTTPError(.notFound, message: "no such stream: use webhooks, jobs or push")
            }
            let pauses = StreamPauses(redis: redis, keys: options.keys)
            switch context.parameters.get("action") {
            case "pause":
                try await pauses.pause(stream)
                context.logAction("pause", target: stream.rawValue)
                return redirect(form.back, done: "paused \(stream.rawValue): workers hold within a second")
            case "resume":
                try await pauses.resume(stream)
                context.logAction("resume", target: stream.rawValue)
                return redirect(form.back, done: "resumed \(stream.rawValue)")
            default:
                throw HTTPError(.notFound, message: "no such action: use pause or resume")
            }
        }
        router.post("accounts/:action") { request, context in
            let form = try await DashboardForm.read(request, csrf: csrf)
            let pauses = StreamPauses(redis: redis, keys: options.keys)
            switch context.parameters.get("action") {
            case "pause":
                guard let account = form.account.nonEmpty, account.utf8.count <= 200 else {
                    throw HTTPError(.badRequest, message: "account: the account's id (at most 200 characters)")
                }
                let changed = try await pauses.pause(account: account)
                context.logAction("pause-account", target: Shown.account(account))
                return redirect(form.back, done: changed ? "paused account \(Shown.account(account))" : "that account was already paused")
            case "resume":
                let paused = try await pauses.pausedAccounts().keys
                guard let reference = form.account_ref, let account = paused.first(where: { Self.reference($0) == reference }) else {
                    return redirect(form.back, done: "that account was not paused (resumed already)")
                }
                try await pauses.resume(account: account)
                context.logAction("resume-account", target: Shown.account(account))
                return redirect(form.back, done: "resumed account \(Shown.account(account))")
            default:
                throw HTTPError(.notFound, message: "no such action: use pause or resume")
            }
        }
        router.post("dead-letters/replay-matching") { request, context in
            let form = try await DashboardForm.read(request, csrf: csrf)
            let filter = try Self.filter(account: form.account, type: form.type, error: form.error, since: form.since, until: form.until)
            guard !filter.isEmpty else {
                throw HTTPError(.badRequest, message: "filter the dead letters first: replaying all of them is `roundupctl dlq replay`")
            }
            let done = try await deadLetters.replay(matching: filter, dryRun: false)
            context.logAction("replay-matching", target: Self.describe(filter), done: done.replayed)
            return redirect(form.back, done: "replayed \(done.replayed) matching dead letter(s)")
        }
        router.post("dead-letters/:id/:action") { request, context in
            let form = try await DashboardForm.read(request, csrf: csrf)
            guard let id = context.parameters.get("id"), Self.isStreamID(id) else {
                throw HTTPError(.badRequest, message: "not a dead letter id (like 7:1700000000000-0)")
            }
            switch context.parameters.get("action") {
            case "replay":
                let done = try await deadLetters.replay(ids: [id])
                context.logAction("replay", target: id, done: done)
                return redirect(form.back, done: done == 1 ? "replayed \(id)" : "\(id) was not there (replayed or deleted already)")
            case "delete":
                let done = try await deadLetters.delete(ids: [id])
                context.logAction("delete", target: id, done: done)
                return redirect(form.back, done: done == 1 ? "deleted \(id)" : "\(id) was not there (replayed or deleted already)")
            default:
                throw HTTPError(.notFound, message: "no such action: use replay or delete")
            }
        }
    }

    // MARK: Pages

    func overview(flash: String?, context: DashboardContext) async throws -> Response {
        let reports = try await QueueInspector.reports(redis: redis, keys: options.keys)
        var failing: [FailingRow] = []
        for stream in RoundupStream.allCases {
            let page = try await PendingInspector.page(stream, redis: redis, keys: options.keys, limit: 10, minDeliveries: 2)
            failing += page.entries.map { FailingRow($0, stream: stream) }
        }
        let now = Date()
        let staleAfter = TimeInterval(options.jobStaleSeconds)
        let recent = try await store.jobs(limit: 200, id: nil)
        var jobs = JobSummary(window: recent.count)
        for job in recent {
            if job.isStale(now: now, after: staleAfter) {
                jobs.stale += 1
            } else if job.status == .running {
                jobs.running += 1
            } else if job.status == .queued {
                jobs.queued += 1
            } else if job.status == .error {
                jobs.errors += 1
                if jobs.recentErrors.count < 10 { jobs.recentErrors.append(JobRow(job, now: now, staleAfter: staleAfter)) }
            }
        }
        var byAccount: [String: (reasons: Set<String>, lists: [String])] = [:]
        for (list, attention) in try await store.allSyncLists() where attention || list.lastReconcileError != nil {
            var entry = byAccount[list.accountID, default: ([], [])]
            if attention { entry.reasons.insert("Trello token revoked") }
            if let error = list.lastReconcileError { entry.reasons.insert("reconcile failed: " + Shown.error(error)) }
            entry.lists.append(TerminalText.printable(list.name))
            byAccount[list.accountID] = entry
        }
        let accounts = byAccount.sorted { $0.key < $1.key }.map {
            AccountRow(
                account: Shown.account($0.key), reason: $0.value.reasons.sorted().joined(separator: "; "),
                lists: $0.value.lists.joined(separator: ", "))
        }
        let pausedAccounts = try await StreamPauses(redis: redis, keys: options.keys).pausedAccounts().sorted { $0.key < $1.key }.map {
            PausedAccountRow(account: Shown.account($0.key), since: Shown.time($0.value), reference: Self.reference($0.key), csrf: csrf)
        }
        let depth = RoundupStream.allCases.map { ($0, history.samples(of: $0).map { Double($0.length) }) }
        let throughput = RoundupStream.allCases.map { ($0, DashboardHistory.throughput(history.samples(of: $0))) }
        let model = OverviewModel(
            streams: reports.map { StreamRow($0, csrf: csrf) },
            charts: [
                ChartModel(title: "Depth", unit: "", values: depth, every: history.every),
                ChartModel(title: "Finished per second", unit: "/s", values: throughput, every: history.every),
            ],
            failing: failing, jobs: jobs, accounts: accounts, pausedAccounts: pausedAccounts, canChange: context.role == .operator)
        return page("overview", model, title: "Overview", current: "/", flash: flash, refresh: options.refreshSeconds, context: context)
    }

    func deadLetterPage(_ request: Request, context: DashboardContext) async throws -> Response {
        let query = request.uri.queryParameters
        let filter = try Self.filter(
            account: query.get("account"), type: query.get("type"), error: query.get("error"), since: query.get("since"),
            until: query.get("until"))
        let after = query.get("after").nonEmpty
        if let after, !Self.isStreamID(after) { throw HTTPError(.badRequest, message: "after: not a dead letter id (like 7:1700000000000-0)") }
        let (letters, next) = try await deadLetters.page(after: after, limit: 50, filter: filter)
        var parameters: [(String, String)] = [
            ("account", filter.account), ("type", filter.type), ("error", filter.error), ("since", query.get("since").nonEmpty),
            ("until", query.get("until").nonEmpty),
        ].compactMap { name, value in value.map { (name, $0) } }
        let back = Self.path("/dead-letters", parameters + (after.map { [("after", $0)] } ?? []))
        let nextPath = next.map { id -> String in
            parameters.append(("after", id))
            return options.basePath + Self.path("/dead-letters", parameters)
        }
        // Filtered: how many match in all (a dry run of the replay the page offers).
        let matching = filter.isEmpty ? nil : try await deadLetters.replay(matching: filter, dryRun: true).matched
        let model = DeadLettersModel(
            total: try await deadLetters.count(),
            filter: .init(
                account: filter.account ?? "", type: filter.type ?? "", error: filter.error ?? "", since: query.get("since") ?? "",
                until: query.get("until") ?? ""),
            filtered: !filter.isEmpty, matching: matching ?? 0, anyMatching: (matching ?? 0) > 0, csrf: csrf, back: back,
            canChange: context.role == .operator,
            letters: letters.map { DeadLetterRow($0, csrf: csrf, back: back) }, next: nextPath)
        return page("deadLetters", model, title: "Dead letters", current: "/dead-letters", flash: query.get("done"), refresh: nil, context: context)
    }

    func pendingPage(_ request: Request, context: DashboardContext) async throws -> Response {
        let query = request.uri.queryParameters
        let stream: RoundupStream
        if let name = query.get("stream").nonEmpty {
            guard let known = RoundupStream(rawValue: name) else { throw HTTPError(.badRequest, message: "stream: use webhooks, jobs or push") }
            stream = known
        } else {
            stream = .webhooks
        }
        let minimum = query.get("min_deliveries").nonEmpty
        guard let minDeliveries = minimum.map({ Int($0) }) ?? 1, (1...1000).contains(minDeliveries) else {
            throw HTTPError(.badRequest, message: "min_deliveries: a whole number from 1 to 1000")
        }
        let after = query.get("after").nonEmpty
        if let after, !Self.isStreamID(after) { throw HTTPError(.badRequest, message: "after: not an entry id (like 7:1700000000000-0)") }
        let (entries, next) = try await PendingInspector.page(
            stream, redis: redis, keys: options.keys, after: after, limit: 50, minDeliveries: minDeliveries)
        let model = PendingModel(
            streams: RoundupStream.allCases.map { .init(name: $0.rawValue, selected: $0 == stream) }, minDeliveries: minDeliveries,
            entries: entries.map { FailingRow($0, stream: stream) },
            next: next.map {
                options.basePath + Self.path("/pending", [("stream", stream.rawValue), ("min_deliveries", String(minDeliveries)), ("after", $0)])
            })
        return page(
            "pending", model, title: "Pending", current: minDeliveries >= 2 ? "/pending?min_deliveries=2" : "", flash: nil, refresh: nil,
            context: context)
    }

    /// Where an event is now (`EventFinder`), by the search box's action id, card id or account.
    func findPage(_ request: Request, context: DashboardContext) async throws -> Response {
        let query = request.uri.queryParameters
        let search = EventFinder.Query(
            actionID: query.get("action").nonEmpty, cardID: query.get("card").nonEmpty, account: query.get("account").nonEmpty)
        for (name, value) in [("action", search.actionID), ("card", search.cardID), ("account", search.account)] {
            if let value, value.utf8.count > 200 { throw HTTPError(.badRequest, message: "\(name): at most 200 characters") }
        }
        var rows: [FoundRow] = []
        var searched = 0
        if !search.isEmpty {
            let (found, accounts) = try await EventFinder.find(search, redis: redis, keys: options.keys, store: store, limit: 50)
            rows = found.map(FoundRow.init)
            searched = accounts
        }
        let model = FindModel(
            action: search.actionID ?? "", card: search.cardID ?? "", account: search.account ?? "", searched: !search.isEmpty,
            searchedAccounts: searched, found: rows)
        return page("find", model, title: "Find", current: "/find", flash: nil, refresh: nil, context: context)
    }

    func jobsPage(flash: String?, context: DashboardContext) async throws -> Response {
        let now = Date()
        let jobs = try await store.jobs(limit: 100, id: nil).map { JobRow($0, now: now, staleAfter: TimeInterval(options.jobStaleSeconds)) }
        return page(
            "jobs", JobsModel(count: jobs.count, jobs: jobs), title: "Jobs", current: "/jobs", flash: flash, refresh: options.refreshSeconds,
            context: context)
    }

    // MARK: Helpers

    /// The dead letters' filter of a page or a form; a time it cannot read is a 400 saying how to write one.
    static func filter(account: String?, type: String?, error: String?, since: String?, until: String?) throws -> DeadLetterQueue.Filter {
        func moment(_ name: String, _ text: String?) throws -> Int? {
            guard let text = text.nonEmpty else { return nil }
            guard let moment = DeadLetterQueue.Filter.moment(text) else {
                throw HTTPError(.badRequest, message: DeadLetterQueue.Filter.unreadable(name, text))
            }
            return moment
        }
        return DeadLetterQueue.Filter(
            account: account.nonEmpty, type: type.nonEmpty, error: error.nonEmpty, since: try moment("since", since),
            until: try moment("until", until))
    }

    /// How a page names an account in a form without showing its id: the first 16 hex digits of its SHA-256.
    static func reference(_ account: String) -> String {
        SHA256.hash(data: Data(account.utf8)).prefix(8).map { String(format: "%02x", $0) }.joined()
    }

    /// A filter as the log says it.
    static func describe(_ filter: DeadLetterQueue.Filter) -> String {
        [
            ("account", filter.account), ("type", filter.type), ("error", filter.error), ("since", filter.since.map(String.init)),
            ("until", filter.until.map(String.init)),
        ].compactMap { name, value in value.map { "\(name)=\(TerminalText.printable($0))" } }.joined(separator: " ")
    }

    func page(
        _ template: String, _ model: Any, title: String, current: String, flash: String?, refresh: Int?, context: DashboardContext
    ) -> Response {
        let content = templates.render(model, withTemplate: template) ?? ""
        let layout = LayoutModel(
            title: title, viewer: context.role == .viewer, basePath: options.basePath, current: current, flash: flash.map(TerminalText.printable),
            refresh: refresh, content: content)
        let html = templates.render(layout, withTemplate: "layout") ?? ""
        return Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    static func json(_ value: JSONValue) -> Response {
        Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: value.canonicalJSON)))
    }

    /// After a form: back to the page it came from (a path of this dashboard only, under its base path), saying what
    /// was done.
    func redirect(_ back: String?, done: String) -> Response {
        Self.redirect(back, done: done, basePath: options.basePath)
    }

    static func redirect(_ back: String?, done: String, basePath: String = "") -> Response {
        var target = "/"
        if let back, back.hasPrefix("/"), !back.hasPrefix("//"), !back.contains("\\"), back.count < 2000 { target = back }
        var components = URLComponents(string: target) ?? URLComponents(string: "/")!
        components.queryItems = (components.queryItems ?? []).filter { $0.name != "done" } + [URLQueryItem(name: "done", value: done)]
        return Response(status: .seeOther, headers: [.location: basePath + (components.string ?? "/")])
    }

    static func path(_ path: String, _ parameters: [(String, String)]) -> String {
        var components = URLComponents()
        components.path = path
        if !parameters.isEmpty { components.queryItems = parameters.map { URLQueryItem(name: $0.0, value: $0.1) } }
        return components.string ?? path
    }

    /// A Redis stream id (milliseconds, a dash, a sequence number), after its webhook shard's number and a colon for
    /// the sharded webhook stream (`7:1700000000000-0`).
    static func isStreamID(_ text: String) -> Bool {
        var text = Substring(text)
        if let colon = text.firstIndex(of: ":") {
            let shard = text[..<colon]
            guard !shard.isEmpty, shard.count <= 4, shard.allSatisfy({ $0.isASCII && $0.isNumber }) else { return false }
            text = text[text.index(after: colon)...]
        }
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        return parts.count == 2 && parts.allSatisfy { !$0.isEmpty && $0.count <= 20 && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }
    }
}

extension Optional where Wrapped == String {
    var nonEmpty: String? {
        guard let self, !self.isEmpty else { return nil }
        return self
    }
}
