import Foundation
import HTTPTypes
import Hummingbird
import Logging
import RoundupCore
import RoundupJobs
import RoundupRedis
import RoundupRuntime
import RoundupStore

/// `/dailyroundup/sync`: the apps' edits as a job, and the jobs' progress.
struct SyncRoutes {
    let store: any ListRepository & CardStateRepository & JobRepository
    let jobs: JobAnswers
    /// The most Trello writes one sync may imply (`SyncWrites`, `ROUNDUP_SYNC_MAX_TRELLO_WRITES`); 0: no bound.
    var maxTrelloWrites = 2000

    var collection: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        routes.post { request, context in try await submit(context.account, request, context) }
        routes.get("jobs/{job_id}") { _, context in try await job(context.account, context.parameters.require("job_id")) }
        return routes
    }

    /// `POST /dailyroundup/sync`: checks every change and the Trello writes they imply, then starts one job for them
    /// (202). While another job of the account is queued or runs, answers 409 with that job's id: the app polls it and
    /// posts again when it ends.
    func submit(_ account: String, _ request: Request, _ context: AuthenticatedContext) async throws -> EditedResponse<JobStarted> {
        let idempotencyKey = try Self.idempotencyKey(request)
        let (deviceID, values) = try SyncRequest.envelope(try await JSONBody.read(request, context: context))
        let lists = Set(try await store.syncLists(accountID: account).map(\.id))
        let received = Date()
        let changes = try values.enumerated().map { index, value in try SyncChange(value, path: "changes[\(index)]", lists: lists) }
        let items = changes.map { $0.item(received: received) }
        try checkTrelloWrites(items)
        for (index, change) in changes.enumerated() {
            let path = "changes[\(index)]"
            if let cardID = change.trelloCardID {
                // The card may be in another synced list than the change names: a move names where it goes, and an edit
                // made before the app applied a move from Trello names where it was (it is written where the card is).
                guard try await store.task(accountID: account, cardID: cardID) != nil else {
                    throw APIError.unprocessable("\(path).trello_card_id: no card \(cardID) is synced in this account")
                }
            }
        }
        // An app's W3C trace context (a valid `traceparent`; anything else is ignored): the job's span continues it.
        let trace = TraceHeaders(
            traceparent: request.headers[HTTPField.Name("traceparent")!], tracestate: request.headers[HTTPField.Name("tracestate")!])
        return try await jobs.queue { jobs in
            try await jobs.submit(
                accountID: account, kind: .sync, deviceID: deviceID, idempotencyKey: idempotencyKey, payload: .array(items.map(\.json)),
                total: items.count, trace: trace)
        }
    }

    /// 413 `payload_too_large` for a sync whose items imply more Trello writes than `maxTrelloWrites`: at one token's
    /// rate (`ROUNDUP_TRELLO_TOKEN_LIMIT`, 10 a second) its job would hold a worker's slot for too long. The error names
    /// the limit (`limit`) and the request's count (`trello_writes`), and the first change past it.
    func checkTrelloWrites(_ items: [SyncItem]) throws {
        guard maxTrelloWrites > 0 else { return }
        let total = SyncWrites.estimate(items)
        guard total > maxTrelloWrites else { return }
        var sum = 0
        let first = items.firstIndex { item in
            sum += SyncWrites.estimate(item)
            return sum > maxTrelloWrites
        }
        let alone = first.map { SyncWrites.estimate(items[$0]) } ?? 0
        let split =
            alone > maxTrelloWrites
            ? "changes[\(first ?? 0)] alone implies \(alone): send fewer check items or links in one change"
            : "changes[\(first ?? 0)] is the first past it: send the changes in several syncs"
        throw APIError(
            .contentTooLarge, "payload_too_large",
            "the changes imply up to \(total) Trello writes; a sync may imply at most \(maxTrelloWrites); \(split)",
            extra: ["limit": .number(Double(maxTrelloWrites)), "trello_writes": .number(Double(total))])
    }

    func job(_ account: String, _ id: String) async throws -> Job {
        guard let job = try await store.job(accountID: account, id: id) else { throw APIError.notFound("no job \(id)") }
        return Job(job, staleAfter: jobs.staleAfter)
    }

    static let idempotencyKeyField = HTTPField.Name("Idempotency-Key")!

    static func idempotencyKey(_ request: Request) throws -> String? {
        guard let key = request.headers[idempotencyKeyField] else { return nil }
        let trimmed = key.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, trimmed.utf8.count <= 800, trimmed.count <= 200 else {
            throw APIError.unprocessable("Idempotency-Key must be 1 to 200 characters (at most 800 bytes of UTF-8)")
        }
        return trimmed
    }
}

/// Jobs submitted for the apps (`JobQueue`), and how the apps are answered: 202 for a job queued now or replayed by
/// its Idempotency-Key, 409 with the other job's id while another job of the account is queued or runs, 503 when Redis
/// could not take it (nothing kept).
struct JobAnswers: Sendable {
    let queue: JobQueue
    let logger: Logger
    var staleAfter: TimeInterval { queue.staleAfter }

    func queue(_ submit: (JobQueue) async throws -> JobSubmission) async throws -> EditedResponse<JobStarted> {
        let submission: JobSubmission
        do {
            submission = try await submit(queue)
        } catch is JobQueue.NotQueued {
            throw APIError.unavailable("the job could not be queued (Redis unreachable); nothing was changed, post again")
        }
        switch submission {
        case .busy(let running):
            throw APIError(
                .conflict, "job_running", "a sync job of this account is still running; poll it and post again when it ends",
                headers: [.retryAfter: "2"], extra: ["job_id": .string(running)])
        case .replayed(let job):
            return accepted(job)
        case .created(let job):
            logger.info("job queued", metadata: ["job": "\(job.id)", "kind": "\(job.kind.rawValue)", "items": "\(job.total)"])
            return accepted(job)
        }
    }

    /// The 202. A job not started yet is `queued` when polled, but this answer says `running`: docs/openapi.yaml's
    /// `JobStarted` has only that value, and the apps' clients before `queued` decode no other.
    private func accepted(_ job: SyncJob) -> EditedResponse<JobStarted> {
        var started = JobStarted(job, staleAfter: staleAfter)
        if started.status == .queued { started.status = .running }
        return EditedResponse(status: .accepted, response: started)
    }
}
