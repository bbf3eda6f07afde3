import Foundation
import HTTPTypes
import Hummingbird
import Logging
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupSync

/// `/dailyroundup/sync`: the apps' edits as a job, and the jobs' progress.
struct SyncRoutes {
    let store: any ListRepository & CardStateRepository & JobRepository
    let jobs: JobAnswers

    var collection: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        routes.post { request, context in try await submit(context.account, request, context) }
        routes.get("jobs/{job_id}") { _, context in try await job(context.account, context.parameters.require("job_id")) }
        return routes
    }

    /// `POST /dailyroundup/sync`: checks every change, then starts one job for them (202). While another job of
    /// the account runs, answers 409 with that job's id: the app polls it and posts again when it ends.
    func submit(_ account: String, _ request: Request, _ context: AuthenticatedContext) async throws -> EditedResponse<JobStarted> {
        let idempotencyKey = try Self.idempotencyKey(request)
        let (deviceID, values) = try SyncRequest.envelope(try await JSONBody.read(request, context: context))
        let lists = Set(try await store.syncLists(accountID: account).map(\.id))
        let received = Date()
        var items: [SyncItem] = []
        for (index, value) in values.enumerated() {
            let path = "changes[\(index)]"
            let change = try SyncChange(value, path: path, lists: lists)
            if let cardID = change.trelloCardID {
                guard let task = try await store.task(accountID: account, cardID: cardID) else {
                    throw APIError.unprocessable("\(path).trello_card_id: no card \(cardID) is synced in this account")
                }
                guard task.syncListID == change.syncListID else {
                    throw APIError.unprocessable("\(path).trello_card_id: the card \(cardID) belongs to another list")
                }
            }
            items.append(change.item(received: received))
        }
        return try await jobs.queue { jobs in
            try await jobs.submit(
                accountID: account, kind: .sync, deviceID: deviceID, idempotencyKey: idempotencyKey, payload: .array(items.map(\.json)),
                total: items.count)
        }
    }

    func job(_ account: String, _ id: String) async throws -> Job {
        guard let job = try await store.job(accountID: account, id: id) else { throw APIError.notFound("no job \(id)") }
        return Job(job, staleAfter: jobs.staleAfter)
    }

    static let idempotencyKeyField = HTTPField.Name("Idempotency-Key")!

    static func idempotencyKey(_ request: Request) throws -> String? {
        guard let key = request.headers[idempotencyKeyField] else { return nil }
        let trimmed = key.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, trimmed.count <= 200 else { throw APIError.unprocessable("Idempotency-Key must be 1 to 200 characters") }
        return trimmed
    }
}

/// Jobs submitted for the apps (`JobQueue`), and how the apps are answered: 202 for a job queued now or replayed by
/// its Idempotency-Key, 409 with the running job's id while another job of the account runs, 503 when Redis could not
/// take it (nothing kept).
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
            return EditedResponse(status: .accepted, response: JobStarted(job, staleAfter: staleAfter))
        case .created(let job):
            logger.info("job queued", metadata: ["job": "\(job.id)", "kind": "\(job.kind.rawValue)", "items": "\(job.total)"])
            return EditedResponse(status: .accepted, response: JobStarted(job, staleAfter: staleAfter))
        }
    }
}
