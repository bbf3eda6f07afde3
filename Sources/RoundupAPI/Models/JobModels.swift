import Foundation
public import Hummingbird
public import RoundupCore
import RoundupStore

// The bodies of /dailyroundup/sync and the job endpoints.

/// A job just queued (or replayed by its Idempotency-Key): 202.
public struct JobStarted: ResponseCodable, Sendable, Equatable {
    public var jobID: String
    public var status: JobStatus
    public var total: Int

    enum CodingKeys: String, CodingKey {
        case jobID = "job_id"
        case status, total
    }

    init(_ job: SyncJob, staleAfter: TimeInterval) {
        jobID = job.id
        status = Job.visibleStatus(job, staleAfter: staleAfter).status
        total = job.total
    }
}

/// `GET /dailyroundup/sync/jobs/{job_id}`.
public struct Job: ResponseCodable, Sendable, Equatable {
    public var jobID: String
    public var kind: JobKind
    public var status: JobStatus
    public var processed: Int
    public var total: Int
    /// One result per item, as the job recorded it.
    public var results: [JSONValue]
    @Nullable public var error: String?
    public var createdAt: String
    public var updatedAt: String

    enum CodingKeys: String, CodingKey {
        case jobID = "job_id"
        case kind, status, processed, total, results, error
        case createdAt = "created_at"
        case updatedAt = "updated_at"
    }

    init(_ job: SyncJob, staleAfter: TimeInterval) {
        jobID = job.id
        kind = job.kind
        (status, error) = Self.visibleStatus(job, staleAfter: staleAfter)
        processed = job.processed
        total = job.total
        results = job.results.map(\.json)
        createdAt = job.createdAt
        updatedAt = job.updatedAt
    }

    /// What the app sees: a running job whose heartbeat stopped reads as `error`/`stale`.
    static func visibleStatus(_ job: SyncJob, staleAfter: TimeInterval) -> (status: JobStatus, error: String?) {
        if job.isStale(staleAfter: staleAfter) { return (.error, JobOutcome.stale.rawValue) }
        return (job.status, job.error)
    }
}

/// `/healthz` and `/readyz`.
public struct ServiceStatus: ResponseCodable, Sendable, Equatable {
    public var status: String
}
