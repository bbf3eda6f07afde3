import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

/// Turns every error into the JSON envelope (`APIError`). Hummingbird's router answers a path it does not know, and
/// a known path asked with a method it does not have, with the same 404; `AllowedMethods` tells the two apart, so
/// the second is 405 with `Allow`.
struct ErrorMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext
    let allowed: AllowedMethods

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            throw error
        } catch let error as HTTPError {
            switch error.status {
            case .notFound:
                let methods = try await allowed.methods(for: request.uri.path, context: context)
                if !methods.isEmpty {
                    let list = methods.joined(separator: ", ")
                    throw APIError(
                        .methodNotAllowed, "method_not_allowed", "\(request.method.rawValue) is not allowed here; use \(list)",
                        headers: [.allow: list])
                }
                throw APIError.notFound("no such path")
            case .contentTooLarge: throw APIError(.contentTooLarge, "payload_too_large", "the body is over 1 MiB")
            case .badRequest: throw APIError.badRequest(error.body ?? "bad request")
            default: throw APIError(error.status, "http_\(error.status.code)", error.body ?? error.status.reasonPhrase)
            }
        } catch {
            // A bug or an outage, never bad input: log it whole, tell the client little.
            context.logger.error("request failed", metadata: ["path": "\(request.uri.path)", "error": "\(error)"])
            throw APIError(.internalServerError, "internal", "the server failed; it is logged")
        }
    }
}

/// The methods each path has, resolved by Hummingbird's own router: a second router with one route per path of the
/// API's router (`Router.routes`), answering with the methods that path has.
struct AllowedMethods: Sendable {
    static let header = HTTPField.Name("X-Roundup-Allow")!
    let responder: RouterResponder<APIRequestContext>

    init(routes: [Router<APIRequestContext>.RouteDescription]) {
        var paths: [(path: RouterPath, methods: [String])] = []
        for route in routes {
            if let index = paths.firstIndex(where: { $0.path.description == route.path.description }) {
                paths[index].methods.append(route.method.rawValue)
            } else {
                paths.append((route.path, [route.method.rawValue]))
            }
        }
        let table = Router(context: APIRequestContext.self)
        for (path, methods) in paths {
            let list = methods.joined(separator: ", ")
            table.get(path) { _, _ in Response(status: .noContent, headers: [Self.header: list]) }
        }
        responder = table.buildResponder()
    }

    /// The methods the path has; none when no route has it.
    func methods(for path: String, context: APIRequestContext) async throws -> [String] {
        let probe = Request(head: HTTPRequest(method: .get, scheme: nil, authority: nil, path: path), body: RequestBody(buffer: ByteBuffer()))
        let response = try await responder.respond(to: probe, context: context)
        guard response.status == .noContent, let list = response.headers[Self.header] else { return [] }
        return list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
    }
}
