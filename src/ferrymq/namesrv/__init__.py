from .routes import RouteRegistry
from .server import NameServer, NamesrvConfig, NamesrvConfigError

__all__ = ['NameServer', 'NamesrvConfig', 'NamesrvConfigError', 'RouteRegistry']
