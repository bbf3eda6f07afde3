public import Foundation
import NIOCore
public import RoundupCore
public import RoundupRedis
public import RoundupRuntime
public import RoundupStore

/// Submitting a background job and putting it on the job stream, in one place for every caller (the API's sync and
/// list jobs, `roundupctl reconcile`): a job the stream did not take is ended at once (`could not be queued`), so its
/// account is not blocked behind a job no worker will ever run, and the caller is told.
public struct JobQueue: Sendable {
    /// The job was stored but Redis did not take its entry; it has been ended, nothing else changed: submit again.
    public struct NotQueued: Error, Sendable, CustomStringConvertible {
        public var jobID: String
        public var reason: String
        public var description: String { "job \(jobID) could not be queued: \(reason)" }
    }

    let store: any JobRepository
    let redis: RedisClient
    let keys: RedisKeys
    /// When a job without a heartbeat reads as stale (`ROUNDUP_JOB_STALE_SECONDS`).
    public let staleAfter: TimeInterval

    public init(store: any JobRepository, redis: RedisClient, keys: RedisKeys, staleAfter: TimeInterval) {
        self.store = store
        self.redis = redis
        self.keys = keys
        self.staleAfter = staleAfter
    }

    /// Submits a job (`JobRepository.submitJob`: the account's lease, the idempotency key) and queues one created now.
    public func submit(
        accountID: String, kind: JobKind, deviceID: String? = nil, idempotencyKey: String? = nil, payload: JSONValue, total: Int
    ) async throws -> JobSubmission {
        let submission = try await store.submitJob(
            accountID: accountID, kind: kind, deviceID: deviceID, idempotencyKey: idempotencyKey, payload: payload, total: total,
            staleAfter: staleAfter)
        if case .created(let job) = submission { try await enqueue(job) }
        return submission
    }

    /// Appends a stored job's entry to the job stream; when Redis does not take it, the job is ended and `NotQueued` thrown.
    public func enqueue(_ job: SyncJob) async throws {
        do {
            _ = try await redis.send(
                .streamAppend(keys.jobStream, fields: SyncJobMessage(jobID: job.id, account: job.accountID, kind: job.kind).fields),
                timeout: .seconds(2))
        } catch {
            try? await store.finishJob(jobID: job.id, status: .error, error: "could not be queued")
            throw NotQueued(jobID: job.id, reason: "\(error)")
        }
    }
}
