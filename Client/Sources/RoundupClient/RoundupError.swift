import Foundation
import HTTPTypes
import OpenAPIRuntime

/// Every failure the server answers, as one error: its HTTP status, the server's `code` (an `OpenEnum`, so a newer
/// server's codes decode too), its `message` for people, and the request id to quote in a report. Failures that never
/// reached the server (no network, a timeout) stay the transport's own errors.
public struct RoundupError: Error, Sendable, CustomStringConvertible {
    public var status: Int
    public var code: OpenEnum<Roundup.ErrorCode>
    public var message: String
    /// The request's id (`X-Request-Id`), as the server logged it.
    public var requestID: String?
    /// How long the server asked the client to wait (`Retry-After`), for 429, 503 and 409 `job_running`.
    public var retryAfter: Duration?
    /// The running job of a 409 `job_running`.
    public var jobID: String?

    public init(
        status: Int, code: OpenEnum<Roundup.ErrorCode>, message: String, requestID: String? = nil, retryAfter: Duration? = nil,
        jobID: String? = nil
    ) {
        self.status = status
        self.code = code
        self.message = message
        self.requestID = requestID
        self.retryAfter = retryAfter
        self.jobID = jobID
    }

    public var description: String {
        "\(status) \(code.rawValue): \(message)" + (requestID.map { " (request \($0))" } ?? "")
    }

    /// The server's answer, from an error response's status, headers and body (`{"error": {...}}`); a body that is no
    /// such envelope (a proxy's page, say) still gives the status.
    static func from(_ response: HTTPResponse, body: Data) -> RoundupError {
        struct Envelope: Decodable {
            struct Inner: Decodable {
                var code: String?
                var message: String?
                var request_id: String?
                var job_id: String?
            }
            var error: Inner
        }
        let envelope = try? JSONDecoder().decode(Envelope.self, from: body)
        let retry = response.headerFields[.retryAfter].flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }.map { Duration.seconds($0) }
        return RoundupError(
            status: response.status.code,
            code: OpenEnum(rawValue: envelope?.error.code ?? "http_\(response.status.code)"),
            message: envelope?.error.message ?? (String(data: body.prefix(300), encoding: .utf8) ?? response.status.reasonPhrase),
            requestID: envelope?.error.request_id ?? response.headerFields[HTTPField.Name("X-Request-Id")!],
            retryAfter: retry, jobID: envelope?.error.job_id)
    }

    /// The `RoundupError` inside an error the generated client threw, or the error as it is.
    static func unwrap(_ error: any Error) -> any Error {
        if let error = error as? ClientError { return unwrap(error.underlyingError) }
        return error
    }
}

/// Turns every response of 400 or more into a thrown `RoundupError`, so the typed operations see only successes.
struct ErrorMiddleware: ClientMiddleware {
    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        let (response, responseBody) = try await next(request, body, baseURL)
        guard response.status.code >= 400 else { return (response, responseBody) }
        var data = Data()
        if let responseBody { data = try await Data(collecting: responseBody, upTo: 1 << 20) }
        throw RoundupError.from(response, body: data)
    }
}

/// Sends the account's bearer token with every request.
struct BearerMiddleware: ClientMiddleware {
    let token: String

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var request = request
        request.headerFields[.authorization] = "Bearer \(token)"
        return try await next(request, body, baseURL)
    }
}
