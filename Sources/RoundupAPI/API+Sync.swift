import Foundation
import HTTPTypes
import Hummingbird
import Logging
import RoundupCore
import RoundupRedis
import RoundupStore
import RoundupSync

extension API {
    static let maxSyncChanges = 500

    /// `POST /dailyroundup/sync`: checks every change, then starts one job for them (202). While another job of
    /// the account runs, answers 409 with that job's id: the app polls it and posts again when it ends.
    func submitSync(_ account: String, _ request: Request, _ context: APIRequestContext) async throws -> Response {
        let idempotencyKey = try Self.idempotencyKey(request)
        let body = try await JSONBody.read(request, context: context)
        try body.allowOnly(["device_id", "changes"])
        let deviceID = try body.requiredString("device_id", maxLength: 200)
        guard let changesValue = body.object["changes"] else { throw APIError.unprocessable("changes is required") }
        guard case .array(let changes) = changesValue else { throw APIError.badRequest("changes must be an array") }
        guard !changes.isEmpty else { throw APIError.unprocessable("changes must not be empty") }
        guard changes.count <= Self.maxSyncChanges else {
            throw APIError.unprocessable("at most \(Self.maxSyncChanges) changes per request; split them over several syncs")
        }
        let lists = Set(try await store.syncLists(accountID: account).map(\.id))
        var items: [SyncItem] = []
        for (index, value) in changes.enumerated() {
            items.append(try await Self.syncItem(value, path: "changes[\(index)]", account: account, lists: lists, store: store))
        }
        let submission = try await store.submitJob(
            accountID: account, kind: "sync", deviceID: deviceID, idempotencyKey: idempotencyKey, payload: .array(items.map(\.json)),
            total: items.count, staleAfter: options.staleAfter)
        return try await answer(submission, account: account)
    }

    /// `POST /dailyroundup/lists/{id}/import`: a job that emits a create for every open card of the list.
    func importList(_ account: String, _ id: String) async throws -> Response {
        guard try await store.syncList(accountID: account, id: id) != nil else { throw APIError.notFound("no list \(id)") }
        let submission = try await store.submitJob(
            accountID: account, kind: "import", deviceID: nil, idempotencyKey: nil, payload: .object(["sync_list_id": .string(id)]),
            total: 0, staleAfter: options.staleAfter)
        return try await answer(submission, account: account)
    }

    /// `POST /dailyroundup/lists/{id}/reconcile`: a job that compares the list with Trello now (and repairs its webhooks).
    func reconcileList(_ account: String, _ id: String) async throws -> Response {
        guard try await store.syncList(accountID: account, id: id) != nil else { throw APIError.notFound("no list \(id)") }
        let submission = try await store.submitJob(
            accountID: account, kind: "reconcile", deviceID: nil, idempotencyKey: nil, payload: .object(["sync_list_id": .string(id)]),
            total: 1, staleAfter: options.staleAfter)
        return try await answer(submission, account: account)
    }

    private func answer(_ submission: JobSubmission, account: String) async throws -> Response {
        switch submission {
        case .busy(let running):
            throw APIError(
                .conflict, "job_running", "a sync job of this account is still running; poll it and post again when it ends",
                headers: [.retryAfter: "2"], extra: ["job_id": .string(running)])
        case .replayed(let job):
            return jsonResponse(.accepted, Self.startedJSON(job, staleAfter: options.staleAfter))
        case .created(let job):
            do {
                _ = try await redis.send(
                    RedisCommand("XADD", [
                        RedisArgument(options.keys.jobStream), "*", "job", RedisArgument(job.id), "account", RedisArgument(account),
                        "kind", RedisArgument(job.kind),
                    ]), timeout: .seconds(2))
            } catch {
                // Not queued: end it now, so the account is not blocked behind a job nobody will run.
                try? await store.finishJob(jobID: job.id, status: "error", error: "could not be queued")
                throw APIError.unavailable("the job could not be queued (Redis unreachable); nothing was changed, post again")
            }
            logger.info("job queued", metadata: ["job": "\(job.id)", "kind": "\(job.kind)", "items": "\(job.total)"])
            return jsonResponse(.accepted, Self.startedJSON(job, staleAfter: options.staleAfter))
        }
    }

    static func startedJSON(_ job: SyncJob, staleAfter: TimeInterval) -> JSONValue {
        let (status, _) = visibleStatus(job, staleAfter: staleAfter)
        return .object(["job_id": .string(job.id), "status": .string(status), "total": .number(Double(job.total))])
    }

    /// What the app sees: a running job whose heartbeat stopped reads as `error`/`stale`.
    static func visibleStatus(_ job: SyncJob, staleAfter: TimeInterval) -> (status: String, error: String?) {
        if job.isStale(staleAfter: staleAfter) { return ("error", "stale") }
        return (job.status, job.error)
    }

    func getJob(_ account: String, _ id: String) async throws -> Response {
        guard let job = try await store.job(accountID: account, id: id) else { throw APIError.notFound("no job \(id)") }
        let (status, error) = Self.visibleStatus(job, staleAfter: options.staleAfter)
        return jsonResponse(.ok, .object([
            "job_id": .string(job.id), "kind": .string(job.kind), "status": .string(status), "processed": .number(Double(job.processed)),
            "total": .number(Double(job.total)), "results": .array(job.results.map(\.json)), "error": error.json,
            "created_at": .string(job.createdAt), "updated_at": .string(job.updatedAt),
        ]))
    }

    static func idempotencyKey(_ request: Request) throws -> String? {
        guard let name = HTTPField.Name("Idempotency-Key"), let key = request.headers[name] else { return nil }
        let trimmed = key.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty, trimmed.count <= 200 else { throw APIError.unprocessable("Idempotency-Key must be 1 to 200 characters") }
        return trimmed
    }

    /// One change of a sync request, checked field by field; errors name the change by its index.
    static func syncItem(_ value: JSONValue, path: String, account: String, lists: Set<String>, store: any OutboundStore) async throws -> SyncItem {
        guard case .object(let object) = value else { throw APIError.badRequest("\(path) must be an object") }
        let change = JSONBody(object: object)
        let allowed: Set<String> = ["op", "sync_list_id", "reminder_id", "trello_card_id", "fields", "changed_fields", "modified_at"]
        if let unknown = object.keys.sorted().first(where: { !allowed.contains($0) }) {
            throw APIError.unprocessable("\(path): unknown field \"\(unknown)\"; allowed: \(allowed.sorted().joined(separator: ", "))")
        }
        func prefixed<T>(_ body: () throws -> T) throws -> T {
            do { return try body() } catch let error as APIError {
                throw APIError(error.status, error.code, "\(path).\(error.message)")
            }
        }
        let op = try prefixed { try change.requiredOneOf("op", ["create", "update", "complete", "delete"]) }
        let listID = try prefixed { try change.requiredString("sync_list_id", maxLength: 100) }
        guard lists.contains(listID) else { throw APIError.unprocessable("\(path).sync_list_id: no list \(listID) in this account") }
        let reminderID = try prefixed { try change.requiredString("reminder_id", maxLength: 200) }
        let cardID = try prefixed { try change.string("trello_card_id", required: false, maxLength: 100) }
        let modifiedText = try prefixed { try change.requiredString("modified_at", maxLength: 64) }
        guard let modifiedAt = Timestamp.date(modifiedText) else {
            throw APIError.unprocessable("\(path).modified_at must be an ISO 8601 date-time such as 2026-11-23T09:00:00Z")
        }
        var fields: [String: JSONValue] = [:]
        if let raw = object["fields"], raw != .null {
            guard case .object(let given) = raw else { throw APIError.badRequest("\(path).fields must be an object") }
            for (name, value) in given {
                do {
                    fields[name] = try SyncFields.normalize(name, value, path: "\(path).fields.\(name)")
                } catch let error as SyncFields.Invalid {
                    throw APIError.unprocessable(error.description)
                }
            }
        }
        var changed: [String] = []
        if let raw = object["changed_fields"], raw != .null {
            guard case .array(let names) = raw else { throw APIError.badRequest("\(path).changed_fields must be an array of field names") }
            for name in names {
                guard case .string(let field) = name else { throw APIError.badRequest("\(path).changed_fields must be an array of field names") }
                guard SyncFields.writable.contains(field) else {
                    throw APIError.unprocessable("\(path).changed_fields: unknown field \"\(field)\"; allowed: \(SyncFields.writable.joined(separator: ", "))")
                }
                guard fields[field] != nil || object["fields"]?[field] == .null else {
                    throw APIError.unprocessable("\(path).changed_fields names \(field), which is not in fields")
                }
                if !changed.contains(field) { changed.append(field) }
            }
        }
        switch op {
        case "create":
            guard fields[SyncField.title] != nil else { throw APIError.unprocessable("\(path).fields.title is required for a create") }
            if changed.isEmpty { changed = fields.keys.sorted() }
        case "update":
            guard !changed.isEmpty else { throw APIError.unprocessable("\(path).changed_fields must name at least one field for an update") }
        default:
            break
        }
        if let cardID {
            guard let task = try await store.task(accountID: account, cardID: cardID) else {
                throw APIError.unprocessable("\(path).trello_card_id: no card \(cardID) is synced in this account")
            }
            guard task.syncListID == listID else { throw APIError.unprocessable("\(path).trello_card_id: the card \(cardID) belongs to another list") }
        }
        return SyncItem(op: op, syncListID: listID, reminderID: reminderID, trelloCardID: cardID, fields: fields, changedFields: changed, modifiedAt: modifiedAt)
    }

    // MARK: Conflicts and duplicates

    func resolveConflict(_ account: String, _ idText: String, _ request: Request, _ context: APIRequestContext) async throws -> Response {
        guard let id = Int64(idText), id > 0 else { throw APIError.notFound("no conflict \(idText)") }
        let body = try await JSONBody.read(request, context: context)
        try body.allowOnly(["choice", "value"])
        let choice = try body.requiredOneOf("choice", ["trello", "reminders", "value"])
        if choice == "value", body.object["value"] == nil { throw APIError.unprocessable("value is required when choice is value") }
        do {
            let detail = try await engine.resolveConflict(accountID: account, id: id, choice: choice, value: body.object["value"])
            return jsonResponse(.ok, Self.conflictJSON(detail.record, resolution: detail.resolution, resolvedAt: detail.resolvedAt))
        } catch let error as ResolveError {
            throw Self.apiError(error, what: "conflict \(id)")
        }
    }

    func resolveDuplicate(_ account: String, _ idText: String, _ request: Request, _ context: APIRequestContext) async throws -> Response {
        guard let id = Int64(idText), id > 0 else { throw APIError.notFound("no duplicate \(idText)") }
        let body = try await JSONBody.read(request, context: context)
        try body.allowOnly(["action"])
        let action = try body.requiredOneOf("action", ["merge", "keep_both"])
        do {
            let detail = try await engine.resolveDuplicate(accountID: account, id: id, action: action)
            return jsonResponse(.ok, Self.duplicateJSON(detail.record))
        } catch let error as ResolveError {
            throw Self.apiError(error, what: "duplicate \(id)")
        }
    }

    static func apiError(_ error: ResolveError, what: String) -> APIError {
        switch error {
        case .notFound: return APIError.notFound("no \(what)")
        case .alreadyResolved: return APIError.conflict("\(what) is already resolved")
        case .inProgress: return APIError(.conflict, "resolving", "\(what) is being resolved by another request; read it again in a moment")
        case .invalid(let message): return APIError.unprocessable(message)
        case .trello(let message): return APIError.badGateway("Trello refused the write: \(message)")
        }
    }
}
