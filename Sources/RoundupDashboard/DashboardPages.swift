import Foundation
import RoundupCore
import RoundupOps
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams

/// What the pages show, as the templates read it (swift-mustache renders these by reflection). Every text that came
/// from outside (errors, types, ids) is escaped by the templates; account ids are shown masked, and error texts have
/// credentials cut out (`RoundupLogHandler.redact`).
enum Shown {
    /// An account id as the dashboard shows it: enough to tell accounts apart, not the whole id.
    static func account(_ id: String?) -> String {
        guard let id, !id.isEmpty else { return "?" }
        return id.count > 8 ? String(id.prefix(6)) + "…" : "…"
    }

    static func error(_ text: String?) -> String { RoundupLogHandler.redact(TerminalText.printable(text ?? "")) }

    static func duration(milliseconds: Int?) -> String {
        guard let milliseconds else { return "–" }
        let seconds = Double(milliseconds) / 1000
        if seconds < 60 { return String(format: "%.1f s", seconds) }
        if seconds < 3600 { return String(format: "%.1f min", seconds / 60) }
        return String(format: "%.1f h", seconds / 3600)
    }

    static func time(_ date: Date) -> String { Timestamp.string(date) }
}

struct NavItem {
    var path: String
    var label: String
    var current: Bool
}

struct LayoutModel {
    var title: String
    /// Who is looking: "viewer" is shown (the pages have no forms for them).
    var viewer: Bool
    var nav: [NavItem]
    var flash: String?
    var refresh: Int?
    var generatedAt: String
    var content: String

    static let pages = [
        ("/", "Overview"), ("/dead-letters", "Dead letters"), ("/pending?min_deliveries=2", "Failing"), ("/jobs", "Jobs"), ("/find", "Find"),
    ]

    init(title: String, viewer: Bool, basePath: String, current: String, flash: String?, refresh: Int?, content: String) {
        self.title = title
        self.viewer = viewer
        nav = Self.pages.map { NavItem(path: basePath + $0.0, label: $0.1, current: $0.0 == current) }
        self.flash = flash
        self.refresh = refresh
        generatedAt = Shown.time(Date())
        self.content = content
    }
}

struct StreamRow {
    var name: String
    var length: Int
    var lag: String
    var pending: Int
    var oldestWaiting: String
    var oldestPending: String
    var deadLetters: Int
    var consumers: Int
    var paused: Bool
    var pausedSince: String
    var action: String
    var actionLabel: String
    var csrf: String

    init(_ report: StreamReport, csrf: String) {
        name = report.name.rawValue
        length = report.length
        lag = report.lag.map(String.init) ?? "–"
        pending = report.pending
        oldestWaiting = Shown.duration(milliseconds: report.oldestWaitingAgeMilliseconds)
        oldestPending = Shown.duration(milliseconds: report.oldestPendingAgeMilliseconds)
        deadLetters = report.deadLetters
        consumers = report.consumers.count
        paused = report.pausedSince != nil
        pausedSince = report.pausedSince.map(Shown.time) ?? ""
        action = paused ? "resume" : "pause"
        actionLabel = paused ? "Resume" : "Pause"
        self.csrf = csrf
    }
}

struct ChartModel {
    struct Series {
        var name: String
        var css: String
        var points: String
        var last: String
    }

    var title: String
    var width = 480
    var height = 120
    var maxLabel: String
    var span: String
    var series: [Series]

    /// Lines of `values` per stream, scaled to the highest value of all of them.
    init(title: String, unit: String, values: [(RoundupStream, [Double])], every: Duration) {
        self.title = title
        let top = max(1, values.flatMap(\.1).max() ?? 1)
        maxLabel = String(format: top >= 10 ? "%.0f" : "%.1f", top) + unit
        let count = values.map(\.1.count).max() ?? 0
        span = Shown.duration(milliseconds: Int(Double(count) * Double(every.components.seconds) * 1000))
        let (width, height) = (480, 120)
        series = values.map { stream, line in
            let step = Double(width) / Double(max(1, line.count - 1))
            let points = line.enumerated().map { index, value in
                String(format: "%.1f,%.1f", Double(index) * step, Double(height) - value / top * Double(height - 4))
            }
            return Series(
                name: stream.rawValue, css: "s-" + stream.rawValue, points: points.joined(separator: " "),
                last: line.last.map { String(format: $0 >= 10 ? "%.0f" : "%.1f", $0) + unit } ?? "–")
        }
    }
}

struct FailingRow {
    var stream: String
    var id: String
    var type: String
    var account: String
    var consumer: String
    var deliveries: Int
    var idle: String
    var error: String

    init(_ entry: PendingEntry, stream: RoundupStream) {
        self.stream = stream.rawValue
        id = entry.id
        type = entry.type ?? "?"
        account = Shown.account(entry.account)
        consumer = entry.consumer
        deliveries = entry.deliveries
        idle = Shown.duration(milliseconds: entry.idleMilliseconds)
        error = Shown.error(entry.lastError)
    }
}

struct JobRow {
    var id: String
    var kind: String
    var status: String
    var stale: Bool
    var processed: Int
    var total: Int
    var heartbeat: String
    var account: String
    var createdAt: String
    var updatedAt: String
    var error: String

    init(_ job: JobRecord, now: Date, staleAfter: TimeInterval) {
        id = job.id
        kind = job.kind.rawValue
        status = job.status.rawValue
        stale = job.isStale(now: now, after: staleAfter)
        processed = job.processed
        total = job.total
        heartbeat = Timestamp.date(job.updatedAt).map { Shown.duration(milliseconds: Int(now.timeIntervalSince($0) * 1000)) + " ago" } ?? "?"
        account = Shown.account(job.accountID)
        createdAt = job.createdAt
        updatedAt = job.updatedAt
        error = Shown.error(job.error)
    }
}

struct JobSummary {
    var running = 0
    var stale = 0
    var queued = 0
    var errors = 0
    var window = 0
    var recentErrors: [JobRow] = []
}

struct AccountRow {
    var account: String
    var reason: String
    var lists: String
}

/// An account an operator paused: shown masked; its Resume form names it by a hash of its id, not the id.
struct PausedAccountRow {
    var account: String
    var since: String
    var reference: String
    var csrf: String
}

struct OverviewModel {
    var streams: [StreamRow]
    var charts: [ChartModel]
    var failing: [FailingRow]
    var jobs: JobSummary
    var accounts: [AccountRow]
    var pausedAccounts: [PausedAccountRow]
    /// The operator's forms are shown (a viewer sees the same page without them).
    var canChange: Bool
}

struct DeadLetterRow {
    var id: String
    var type: String
    var account: String
    var action: String
    var deliveries: String
    var failedAt: String
    var error: String
    /// Its failed deliveries, oldest first.
    var attempts: [AttemptRow]
    var csrf: String
    var back: String

    struct AttemptRow {
        var at: String
        var consumer: String
        var error: String

        init(_ attempt: StreamAttempt) {
            at = Shown.time(Date(timeIntervalSince1970: Double(attempt.at) / 1000))
            consumer = TerminalText.printable(attempt.consumer)
            error = Shown.error(attempt.error)
        }
    }

    init(_ letter: DeadLetter, csrf: String, back: String) {
        id = letter.id
        type = letter.type ?? "?"
        account = Shown.account(letter.account)
        action = letter.event?.actionID ?? "?"
        deliveries = letter.letter.deliveries.map(String.init) ?? "?"
        failedAt = letter.letter.failedAt.map { Shown.time(Date(timeIntervalSince1970: Double($0) / 1000)) } ?? "?"
        error = Shown.error(letter.letter.error)
        attempts = letter.letter.attempts.map(AttemptRow.init)
        self.csrf = csrf
        self.back = back
    }
}

struct DeadLettersModel {
    struct Filter {
        var account: String
        var type: String
        var error: String
        var since: String
        var until: String
    }

    var total: Int
    var filter: Filter
    var filtered: Bool
    /// How many dead letters the filter matches in all (every page).
    var matching: Int
    /// (Stored: the templates read stored properties only.)
    var anyMatching: Bool
    /// The replay-matching form's token, and the page it goes back to.
    var csrf: String
    var back: String
    var canChange: Bool
    var letters: [DeadLetterRow]
    var next: String?
}

struct PendingModel {
    struct StreamOption {
        var name: String
        var selected: Bool
    }

    var streams: [StreamOption]
    var minDeliveries: Int
    var entries: [FailingRow]
    var next: String?
}

struct JobsModel {
    var count: Int
    var jobs: [JobRow]
}

struct FindModel {
    var action: String
    var card: String
    var account: String
    var searched: Bool
    var searchedAccounts: Int
    var found: [FoundRow]
}

/// One place an event was found, as the find page shows it.
struct FoundRow {
    var place: String
    var id: String
    var type: String
    var account: String
    var action: String
    var card: String
    /// Where it is, in words: with whom and for how long, its error, or the change it made.
    var detail: String
    /// Its failed deliveries, oldest first.
    var attempts: [DeadLetterRow.AttemptRow]

    init(_ found: EventFinder.Found) {
        attempts = found.attempts.map(DeadLetterRow.AttemptRow.init)
        place = found.place.rawValue.replacingOccurrences(of: "_", with: " ")
        id = found.id ?? "–"
        type = TerminalText.printable(found.type ?? "–")
        account = Shown.account(found.account)
        action = TerminalText.printable(found.actionID ?? "–")
        card = TerminalText.printable(found.cardID ?? "–")
        switch found.place {
        case .waiting: detail = "received \(found.receivedAt ?? "?")"
        case .pending:
            detail =
                "with \(TerminalText.printable(found.consumer ?? "?")) for \(Shown.duration(milliseconds: found.idleMilliseconds)), "
                + "\(found.deliveries ?? 0) deliveries\(found.error.map { ", " + Shown.error($0) } ?? "")"
        case .deadLetter: detail = "\(found.deliveries ?? 0) deliveries, \(Shown.error(found.error))"
        case .applied:
            let change = found.activity
            detail = [change?.createdAt, change?.kind.rawValue, change?.field, change?.message.map(Shown.error)].compactMap { $0 }.joined(
                separator: " · ")
        }
        if let trace = found.traceID { detail += " · trace \(trace)" }
    }
}
