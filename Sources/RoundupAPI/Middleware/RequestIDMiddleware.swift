import Foundation
import HTTPTypes
import Hummingbird
import Logging
import RoundupCore

/// Gives every request an id: the client's own `X-Request-Id` when it is a sane one (a proxy in front may set it),
/// else a new one. It is answered in the `X-Request-Id` header of every response, inside every error body
/// (`error.request_id`), and carried by the request's log lines, so a report from an app finds its logs.
struct RequestIDMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext
    static let header = HTTPField.Name("X-Request-Id")!

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let id = request.headers[Self.header].flatMap(Self.accepted) ?? Hex.lowercase(UUID())
        var context = context
        context.logger[metadataKey: "request_id"] = "\(id)"
        do {
            var response = try await next(request, context)
            response.headers[Self.header] = id
            return response
        } catch var error as APIError {
            error.headers[Self.header] = id
            error.extra["request_id"] = .string(id)
            throw error
        }
    }

    /// A client's id, when it is 1–128 characters of letters, digits and `-_.:`; anything else is replaced.
    static func accepted(_ text: String) -> String? {
        guard (1...128).contains(text.utf8.count),
            text.utf8.allSatisfy({ byte in
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x2D || byte == 0x5F
                    || byte == 0x2E || byte == 0x3A
            })
        else { return nil }
        return text
    }
}
