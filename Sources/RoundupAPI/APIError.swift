public import HTTPTypes
public import Hummingbird
import NIOCore
public import RoundupCore

/// Every error the API answers with: a status and `{"error": {"code", "message"}}`.
public struct APIError: Error, HTTPResponseError, Sendable, CustomStringConvertible {
    public var status: HTTPResponse.Status
    public var code: String
    public var message: String
    public var headers: HTTPFields = [:]
    /// More members of the `error` object (the running job's `job_id` of a 409, say).
    public var extra: [String: JSONValue] = [:]

    public init(_ status: HTTPResponse.Status, _ code: String, _ message: String, headers: HTTPFields = [:], extra: [String: JSONValue] = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        self.extra = extra
    }

    public var description: String { "\(status.code) \(code): \(message)" }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var headers = self.headers
        headers[.contentType] = "application/json"
        var error: [String: JSONValue] = extra
        error["code"] = .string(code)
        error["message"] = .string(message)
        let body = JSONValue.object(["error": .object(error)]).canonicalJSON
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: body)))
    }

    static func badRequest(_ message: String) -> APIError { APIError(.badRequest, "bad_request", message) }
    static func invalidJSON(_ message: String) -> APIError { APIError(.badRequest, "invalid_json", message) }
    static func unauthorized(_ message: String) -> APIError {
        APIError(.unauthorized, "unauthorized", message, headers: [.wwwAuthenticate: "Bearer"])
    }
    static func forbidden(_ message: String) -> APIError { APIError(.forbidden, "forbidden", message) }
    static func notFound(_ message: String) -> APIError { APIError(.notFound, "not_found", message) }
    static func conflict(_ message: String) -> APIError { APIError(.conflict, "conflict", message) }
    static func unprocessable(_ message: String) -> APIError { APIError(.unprocessableContent, "unprocessable", message) }
    static func badGateway(_ message: String) -> APIError { APIError(.badGateway, "bad_gateway", message) }
    static func unavailable(_ message: String) -> APIError { APIError(.serviceUnavailable, "unavailable", message) }
}

/// A page's `limit` query parameter: `standard` when absent; 400 when not an integer, 422 outside 1…`most`.
func pageLimit(_ text: (some StringProtocol)?, standard: Int, most: Int) throws -> Int {
    guard let text else { return standard }
    guard let value = Int(String(text)) else { throw APIError.badRequest("limit must be an integer") }
    guard (1...most).contains(value) else { throw APIError.unprocessable("limit must be between 1 and \(most)") }
    return value
}
