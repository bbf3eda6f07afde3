import Hummingbird
import RoundupJobs
import RoundupStore

/// `/dailyroundup/conflicts`: fields both sides changed, and the user's choice for each.
struct ConflictRoutes: ReviewRoutes {
    let store: any ResolutionRepository
    let engine: SyncEngine

    func list(_ account: String) async throws -> ConflictPage {
        ConflictPage(conflicts: try await store.conflicts(accountID: account).map { Conflict($0) })
    }

    func resolve(_ account: String, _ idText: String, _ request: Request, _ context: AuthenticatedContext) async throws -> Conflict {
        guard let id = Int64(idText), id > 0 else { throw APIError.notFound("no conflict \(idText)") }
        let resolution = try ConflictResolution(try await JSONBody.read(request, context: context))
        do {
            let detail = try await engine.resolveConflict(accountID: account, id: id, choice: resolution.choice, value: resolution.value)
            return Conflict(detail.record, resolution: detail.resolution, resolvedAt: detail.resolvedAt)
        } catch let error as ResolveError {
            throw APIError(error, what: "conflict \(id)")
        }
    }
}

/// `/dailyroundup/duplicates`: cards that may be reminders the app already has, and the user's answer for each.
struct DuplicateRoutes: ReviewRoutes {
    let store: any ResolutionRepository
    let engine: SyncEngine

    func list(_ account: String) async throws -> DuplicatePage {
        DuplicatePage(duplicates: try await store.duplicates(accountID: account).map(Duplicate.init))
    }

    func resolve(_ account: String, _ idText: String, _ request: Request, _ context: AuthenticatedContext) async throws -> Duplicate {
        guard let id = Int64(idText), id > 0 else { throw APIError.notFound("no duplicate \(idText)") }
        let resolution = try DuplicateResolution(try await JSONBody.read(request, context: context))
        do {
            let detail = try await engine.resolveDuplicate(accountID: account, id: id, action: resolution.action)
            return Duplicate(detail.record)
        } catch let error as ResolveError {
            throw APIError(error, what: "duplicate \(id)")
        }
    }
}

/// A list of things for the user to review, and the user's answer to one: `GET /` and `POST /{id}/resolve`.
protocol ReviewRoutes: Sendable {
    associatedtype Page: ResponseGenerator
    associatedtype Item: ResponseGenerator
    func list(_ account: String) async throws -> Page
    func resolve(_ account: String, _ idText: String, _ request: Request, _ context: AuthenticatedContext) async throws -> Item
}

extension ReviewRoutes {
    var collection: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        routes.get { _, context in try await list(context.account) }
        routes.post("{id}/resolve") { request, context in
            try await resolve(context.account, context.parameters.require("id"), request, context)
        }
        return routes
    }
}

extension APIError {
    /// A resolution the engine refused.
    init(_ error: ResolveError, what: String) {
        switch error {
        case .notFound: self = .notFound("no \(what)")
        case .alreadyResolved: self = .conflict("\(what) is already resolved")
        case .inProgress: self = APIError(.conflict, "resolving", "\(what) is being resolved by another request; read it again in a moment")
        case .invalid(let message): self = .unprocessable(message)
        case .trello(let message): self = .badGateway("Trello refused the write: \(message)")
        }
    }
}
