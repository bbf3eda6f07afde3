public import Foundation
public import RoundupCore
import RoundupRuntime
public import RoundupStore

/// `roundupctl jobs`: a background job as operators read it (status, progress, heartbeat age, stale or not). A queued
/// job has no heartbeat yet: it shows how long it has waited for a worker instead (`queued_s`).
public enum JobsReport {
    public static func json(_ job: JobRecord, now: Date, staleAfter: TimeInterval) -> JSONValue {
        let age = Timestamp.date(job.updatedAt).map { JSONValue.number((now.timeIntervalSince($0) * 10).rounded() / 10) } ?? .null
        let queued = job.status == .queued
        return .object([
            "job_id": .string(job.id), "account_id": .string(job.accountID), "kind": .string(job.kind.rawValue),
            "status": .string(job.status.rawValue),
            "processed": .number(Double(job.processed)), "total": .number(Double(job.total)), "error": job.error.map(JSONValue.string) ?? .null,
            "heartbeat_age_s": queued ? .null : age, "queued_s": queued ? age : .null, "stale": .bool(job.isStale(now: now, after: staleAfter)),
            "created_at": .string(job.createdAt), "updated_at": .string(job.updatedAt),
        ])
    }

    /// One line for people; stored text made safe for a terminal.
    public static func line(_ job: JobRecord, now: Date, staleAfter: TimeInterval) -> String {
        let age = Timestamp.date(job.updatedAt).map { String(format: "%.0f s", now.timeIntervalSince($0)) } ?? "?"
        let since = job.status == .queued ? "waiting for a worker for \(age)" : "heartbeat \(age) ago"
        let stale = job.isStale(now: now, after: staleAfter) ? " (STALE)" : ""
        let error = job.error.map { "  error: \(TerminalText.printable($0))" } ?? ""
        return
            "\(job.id)  \(job.kind.rawValue)  \(job.status.rawValue)\(stale)  \(job.processed)/\(job.total)  \(since)  account \(job.accountID)\(error)"
    }

    /// Whether a job will still change: queued (its entry not lost) or running with a live heartbeat.
    public static func isUnderWay(_ job: JobRecord, now: Date, staleAfter: TimeInterval) -> Bool {
        !job.status.hasEnded && !job.isStale(now: now, after: staleAfter)
    }

    /// Whether a job ended badly: with an error, or its worker gone (stale).
    public static func failed(_ job: JobRecord, now: Date, staleAfter: TimeInterval) -> Bool {
        job.status == .error || job.isStale(now: now, after: staleAfter)
    }
}
