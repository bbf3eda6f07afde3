import Hummingbird
import NIOCore
import RoundupCore
import RoundupStore

/// `/dailyroundup/activity`: the history of every decision about the account's items, newest first.
struct ActivityRoutes {
    let activity: any ActivityRepository

    var collection: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        routes.get { request, context in try await page(context.account, request) }
        return routes
    }

    /// Filters by `sync_list_id`, `reminder_id` (its card's rows too) and `trello_card_id`, all optional; pages with
    /// `before_id` and `limit` (1–200, default 50).
    func page(_ account: String, _ request: Request) async throws -> Response {
        let parameters = request.uri.queryParameters
        func id(_ name: Substring) throws -> String? {
            guard let text = parameters[name].map(String.init) else { return nil }
            guard !text.isEmpty, text.utf8.count <= 128 else { throw APIError.unprocessable("\(name) must be 1 to 128 characters") }
            return text
        }
        var query = ActivityQuery(syncListID: try id("sync_list_id"), reminderID: try id("reminder_id"), cardID: try id("trello_card_id"))
        if let text = parameters["before_id"] {
            guard let value = Int64(String(text)) else { throw APIError.badRequest("before_id must be an integer") }
            guard value > 0 else { throw APIError.unprocessable("before_id must be positive") }
            query.beforeID = value
        }
        let limit = try pageLimit(parameters["limit"], standard: 50, most: 200)
        query.limit = limit + 1
        let rows = try await activity.activity(accountID: account, query)
        let page = rows.prefix(limit)
        let more = rows.count > limit
        let body: JSONValue = .object([
            "activity": .array(page.map(\.json)), "has_more": .bool(more),
            "next_before_id": more ? page.last.map { .number(Double($0.id)) } ?? .null : .null,
        ])
        return Response(
            status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: ByteBuffer(string: body.canonicalJSON)))
    }
}
