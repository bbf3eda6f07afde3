import Foundation
import HTTPTypes
public import Hummingbird
import Logging
import NIOCore
import RoundupCore
import RoundupRuntime

/// Who is looking at the dashboard: the operator (every page and form) or a viewer (every page, no change).
public enum DashboardRole: String, Sendable {
    case `operator`, viewer
}

/// A dashboard request's context: who made it, as `DashboardGuard` found.
public struct DashboardContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var role: DashboardRole = .operator
    /// The user name of the request's HTTP Basic credentials (printable, at most 64 characters), as they say who they
    /// are; "-" without one.
    public var user = "-"

    public init(source: ApplicationRequestContextSource) { coreContext = .init(source: source) }

    /// A change made, logged with who made it.
    func logAction(_ action: String, target: String, done: Int? = nil) {
        var metadata: Logger.Metadata = ["action": "\(action)", "target": "\(target)", "role": "\(role.rawValue)", "user": "\(user)"]
        if let done { metadata["done"] = "\(done)" }
        logger.notice("dashboard action", metadata: metadata)
    }
}

/// What every dashboard request passes: a password when one is set (HTTP Basic, compared in constant time: the
/// operator's, or the viewer's, who may not change anything), or without one a loopback Host name; and for a form,
/// proof that it came from a page of this dashboard: the browser's own `Sec-Fetch-Site` and `Origin` say same-origin,
/// and the form carries this process's token. Behind a proxy at a sub-path, the base path is taken off a request that
/// has it (for these checks). Every answer forbids framing, sniffing, caching and any script (`Content-Security-Policy`).
struct DashboardGuard: RouterMiddleware {
    typealias Context = DashboardContext
    let token: String?
    let viewerToken: String?
    let basePath: String
    let csrf: String

    static let securityHeaders: [(HTTPField.Name, String)] = [
        (.contentSecurityPolicy, "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
        (HTTPField.Name("X-Frame-Options")!, "DENY"), (HTTPField.Name("X-Content-Type-Options")!, "nosniff"),
        (HTTPField.Name("Referrer-Policy")!, "same-origin"), (.cacheControl, "no-store"),
    ]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response: Response
        var context = context
        do {
            try checkHost(request)
            (context.role, context.user) = try authorize(request)
            if request.method == .post {
                guard context.role == .operator else {
                    context.logger.warning(
                        "dashboard action refused to a viewer",
                        metadata: ["path": "\(TerminalText.printable(localPath(request)))", "user": "\(context.user)"])
                    throw HTTPError(.forbidden, message: "the viewer's password shows the dashboard and changes nothing: sign in as the operator")
                }
                try checkOrigin(request)
            }
            response = try await next(request, context)
        } catch let error as HTTPError {
            response = try error.response(from: request, context: context)
            if error.status == .unauthorized { response.headers[.wwwAuthenticate] = #"Basic realm="roundup dashboard", charset="UTF-8""# }
        } catch {
            // Redis or the store failed: say so (without credentials), and log it.
            context.logger.error("dashboard request failed", metadata: ["path": "\(request.uri.path)", "error": "\(error)"])
            let message = "Redis or the store failed: " + RoundupLogHandler.redact("\(error)")
            response = try HTTPError(.serviceUnavailable, message: message).response(from: request, context: context)
        }
        for (name, value) in Self.securityHeaders { response.headers[name] = value }
        return response
    }

    /// Without a password, only a loopback Host name is answered. A page of another site whose DNS name is re-pointed at
    /// 127.0.0.1 (DNS rebinding) is same-origin with itself: it could read every page, the forms' token with them, and
    /// post forms; its requests carry its own name. With a password the browser does not send it to that name. The
    /// health check is answered under any name, as `authorize` lets it through: it tells nothing but that the process
    /// answers.
    func checkHost(_ request: Request) throws {
        guard token == nil, localPath(request) != "/healthz" else { return }
        guard Self.isLoopbackHost(request.head.authority) else {
            throw HTTPError(
                .forbidden,
                message: "without ROUNDUP_DASHBOARD_TOKEN the dashboard answers only loopback Host names (127.0.0.1, [::1], localhost); "
                    + "set a password to serve it under another name")
        }
    }

    /// Whether `authority` (the request's Host) is `127.0.0.1`, `[::1]` or `localhost` (in any case), alone or with a
    /// port of one to five digits. A missing or empty Host is not.
    static func isLoopbackHost(_ authority: String?) -> Bool {
        guard let authority else { return false }
        var host = Substring(authority)
        // A port follows the last colon, unless that colon is inside the brackets of an IPv6 address.
        if let colon = authority.lastIndex(of: ":"), !authority[colon...].contains("]") {
            let port = authority[authority.index(after: colon)...]
            guard (1...5).contains(port.count), port.allSatisfy({ $0.isASCII && $0.isNumber }) else { return false }
            host = authority[..<colon]
        }
        return host == "127.0.0.1" || host == "[::1]" || host.lowercased() == "localhost"
    }

    /// The request's path within the dashboard: without the base path when it has it (a proxy that passes the whole
    /// path; the router answers it there too), as it is otherwise.
    func localPath(_ request: Request) -> String {
        let path = request.uri.path
        guard !basePath.isEmpty, path == basePath || path.hasPrefix(basePath + "/") else { return path }
        let rest = path.dropFirst(basePath.count)
        return rest.isEmpty ? "/" : String(rest)
    }

    /// Who the request's credentials say: the operator without any password (loopback only), else the one whose
    /// password it carries. The health check tells nothing but that the process answers.
    func authorize(_ request: Request) throws -> (DashboardRole, String) {
        guard let token, localPath(request) != "/healthz" else { return (.operator, "-") }
        guard let header = request.headers[.authorization], header.lowercased().hasPrefix("basic "),
            let decoded = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
            let colon = decoded.firstIndex(of: UInt8(ascii: ":"))
        else { throw HTTPError(.unauthorized, message: "the dashboard asks for its password (ROUNDUP_DASHBOARD_TOKEN)") }
        let password = Array(decoded[decoded.index(after: colon)...])
        let name = String(decoding: decoded[..<colon], as: UTF8.self)
        let user = name.isEmpty ? "-" : String(TerminalText.printable(name).prefix(64))
        // Both compared, whichever matches: the time taken does not say which password was tried.
        let isOperator = constantTimeEquals(password, Array(token.utf8))
        let isViewer = viewerToken.map { constantTimeEquals(password, Array($0.utf8)) } ?? false
        if isOperator { return (.operator, user) }
        if isViewer { return (.viewer, user) }
        throw HTTPError(.unauthorized, message: "the dashboard asks for its password (ROUNDUP_DASHBOARD_TOKEN)")
    }

    /// Browsers say where a request comes from; a form posted from another site is refused before its token is read.
    func checkOrigin(_ request: Request) throws {
        if let site = request.headers[HTTPField.Name("Sec-Fetch-Site")!], site != "same-origin", site != "none" {
            throw HTTPError(.forbidden, message: "a form from another site (Sec-Fetch-Site: \(site)) is refused")
        }
        if let origin = request.headers[.origin], let host = request.head.authority {
            guard origin == "http://" + host || origin == "https://" + host else {
                throw HTTPError(.forbidden, message: "a form from another origin is refused")
            }
        }
    }
}

/// A dashboard form: its token (checked here) and the page to go back to.
struct DashboardForm: Decodable {
    var csrf: String
    var back: String?
    /// The dead letters' filter a replay of those matching names (`/dead-letters/replay-matching`).
    var account: String?
    var type: String?
    var error: String?
    var since: String?
    var until: String?
    /// An account to pause (its id), or a paused one to resume (`account_ref`: the hash the page shows).
    var account_ref: String?

    static func read(_ request: Request, csrf: String) async throws -> DashboardForm {
        guard request.headers[.contentType]?.hasPrefix("application/x-www-form-urlencoded") == true else {
            throw HTTPError(.unsupportedMediaType, message: "send the dashboard's form (application/x-www-form-urlencoded)")
        }
        let body = try await request.body.collect(upTo: 16 * 1024)
        let form: DashboardForm
        do {
            form = try URLEncodedFormDecoder().decode(DashboardForm.self, from: String(buffer: body))
        } catch {
            throw HTTPError(.badRequest, message: "the form lacks its csrf token")
        }
        guard constantTimeEquals(Array(form.csrf.utf8), Array(csrf.utf8)) else {
            throw HTTPError(.forbidden, message: "the form's csrf token is wrong: reload the page and try again")
        }
        return form
    }
}
