import Hummingbird

/// The request context: Hummingbird's core plus the body limit the API promises (1 MiB).
public struct APIRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
    }

    public var maxUploadSize: Int { 1 << 20 }
}
