from .routes import RouteRegistry
from .server import NameServer, NamesrvConfig

__all__ = ['NameServer', 'NamesrvConfig', 'RouteRegistry']
