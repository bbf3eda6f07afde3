/// An account's Trello API key and token: what the store keeps (encrypted at rest where configured) and every Trello
/// request is signed with. Its description masks both, so one interpolated into a log line leaks nothing.
public struct TrelloCredentials: Sendable, Hashable, CustomStringConvertible {
    public var apiKey: String
    public var token: String

    public init(apiKey: String, token: String) {
        self.apiKey = apiKey
        self.token = token
    }

    public var description: String { "TrelloCredentials(api key …\(apiKey.suffix(4)), token masked)" }
}
