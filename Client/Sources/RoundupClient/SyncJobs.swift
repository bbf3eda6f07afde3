import Foundation
import OpenAPIRuntime

extension RoundupClient {
    /// A new key for one batch of edits (`submitSync`). Store it with the batch before posting, and post the batch
    /// again with the same key after a crash or a lost answer: the server answers the job the first post started, so
    /// no card is made twice.
    public static func makeIdempotencyKey() -> String { UUID().uuidString }

    /// Posts the app's edits as a sync job. While another job of the account runs (409 `job_running`), it waits as
    /// the server asks (`Retry-After`) and posts again, for at most `busyFor`. `idempotencyKey` (`makeIdempotencyKey`,
    /// kept by the app with the batch across launches) makes a retry, in this process or after a crash, start no second
    /// job. `traceparent`: the app's W3C trace context, which the server's job continues when it traces.
    public func submitSync(
        deviceID: String, changes: [SyncChange], idempotencyKey: String, busyFor: Duration = .seconds(120), traceparent: String? = nil
    ) async throws -> JobStarted {
        let deadline = ContinuousClock.now + busyFor
        var attempt = 0
        while true {
            do {
                let output = try await call {
                    try await api.submitSync(
                        headers: .init(idempotencyKey: idempotencyKey, traceparent: traceparent),
                        body: .json(.init(deviceId: deviceID, changes: changes)))
                }
                switch output {
                case .accepted(let accepted): return try accepted.body.json
                case let other: throw Self.unexpected(other)
                }
            } catch let error as RoundupError where error.code == .jobRunning {
                attempt += 1
                let wait = retry.delay(retry: attempt, retryAfter: error.retryAfter ?? .seconds(2))
                guard ContinuousClock.now + wait < deadline else { throw error }
                try await Task.sleep(for: wait)
            }
        }
    }

    public func job(_ id: String) async throws -> SyncJob {
        switch try await call({ try await api.getSyncJob(path: .init(jobId: id)) }) {
        case .ok(let ok): return try ok.body.json
        case let other: throw Self.unexpected(other)
        }
    }

    /// Polls a job until it is neither `queued` (waiting for a worker) nor `running` (`completed`, `error`, `error` with
    /// `stale`, or a state a newer server knows), backing off from 200 ms to 5 s; throws `RoundupError` `timeout` after
    /// `timeout`.
    public func waitForJob(_ id: String, timeout: Duration = .seconds(300)) async throws -> SyncJob {
        let deadline = ContinuousClock.now + timeout
        var wait = Duration.milliseconds(200)
        while true {
            let job = try await job(id)
            if job.status != .queued && job.status != .running { return job }
            guard ContinuousClock.now + wait < deadline else {
                throw RoundupError(status: 0, code: OpenEnum(rawValue: "timeout"), message: "job \(id) still running after \(timeout)")
            }
            try await Task.sleep(for: wait)
            wait = min(wait * 2, .seconds(5))
        }
    }

    /// Posts the edits and waits for their job (`submitSync`, `waitForJob`); `idempotencyKey` as for `submitSync`.
    public func sync(deviceID: String, changes: [SyncChange], idempotencyKey: String, timeout: Duration = .seconds(300)) async throws -> SyncJob {
        let started = try await submitSync(deviceID: deviceID, changes: changes, idempotencyKey: idempotencyKey)
        return try await waitForJob(started.jobId, timeout: timeout)
    }
}

extension Components.Schemas.SyncJob {
    /// The job's worker stopped heartbeating: stop polling; the same edits can be posted again safely.
    public var isStale: Bool { status == .error && error == "stale" }
}

extension Components.Schemas.Change {
    /// A field's value, when the change carries it, typed: `String` (dates too: an ISO 8601 date-time, or
    /// `YYYY-MM-DD` for an all-day date), `Bool`, `Int`, `[Label]`, `[Checklist]`, `[Attachment]` or `Location` (the
    /// same values as `fields.title` and the others). A field this version of the
    /// client does not know is in `fields.additionalProperties`.
    public func value(of field: Roundup.FieldName) -> (any Sendable)? {
        switch field {
        case .title: fields.title
        case .notes: fields.notes
        case .dueDate: fields.dueDate
        case .startDate: fields.startDate
        case .completed: fields.completed
        case .priority: fields.priority
        case .priorityLevel: fields.priorityLevel
        case .labels: fields.labels
        case .checklists: fields.checklists
        case .url: fields.url
        case .location: fields.location
        case .attachments: fields.attachments
        case .trelloURL: fields.trelloUrl
        case .dueReminderMinutes: fields.dueReminderMinutes
        }
    }
}
